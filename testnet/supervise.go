package testnet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// SupervisorLog is the supervisor's log in the testnet directory.
const SupervisorLog = "supervisor.log"

// Supervise runs a testnet until ctx ends or a client of its control API asks it to stop:
// it starts the nodes, waits until they are ready, serves the control API and records
// its own PID and the API's address in StateFile (which is how `testnet up` knows it is
// ready). It is the body of the hidden `meshnode testnet supervise` command, the detached
// process `testnet up` leaves behind; it stops every node before returning.
func Supervise(ctx context.Context, cfg Config, readyTimeout time.Duration) (err error) {
	tn, err := New(cfg)
	if err != nil {
		return err
	}
	defer func() {
		if serr := tn.Stop(); err == nil {
			err = serr
		}
	}()
	start, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := tn.Start(start); err != nil {
		return err
	}
	if err := tn.WaitReady(start); err != nil {
		return err
	}
	ctl, err := ServeControl(tn)
	if err != nil {
		return err
	}
	defer ctl.Close()
	if err := tn.SetSupervisor(os.Getpid(), ctl.Addr()); err != nil {
		return err
	}
	cfg.Logger.Info("testnet ready", "dir", tn.Dir(), "control", ctl.Addr())
	select {
	case <-ctx.Done():
	case <-ctl.Stopped():
	}
	return nil
}

// StartSupervisor execs `bin args…` (the supervise command) detached from the terminal,
// with its output in dir/SupervisorLog, and waits until StateFile names it as the
// supervisor. If it exits first, the error carries the end of its log.
func StartSupervisor(ctx context.Context, bin string, args []string, dir string) (State, error) {
	if err := PrivateDir(dir); err != nil {
		return State{}, err
	}
	log, err := os.OpenFile(filepath.Join(dir, SupervisorLog), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return State{}, err
	}
	defer log.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr, cmd.SysProcAttr = log, log, detachedAttr()
	if err := cmd.Start(); err != nil {
		return State{}, fmt.Errorf("start the testnet supervisor: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if st, err := LoadState(dir); err == nil && st.Supervisor == cmd.Process.Pid && st.Control != "" {
			return st, nil
		}
		select {
		case err := <-exited:
			return State{}, fmt.Errorf("the testnet supervisor exited (%v); its log %s ends:\n%s",
				err, filepath.Join(dir, SupervisorLog), tailFile(filepath.Join(dir, SupervisorLog), 3000))
		case <-ctx.Done():
			signalGroup(cmd.Process, syscall.SIGTERM)
			return State{}, fmt.Errorf("the testnet supervisor was not ready: %w (log: %s)", ctx.Err(), filepath.Join(dir, SupervisorLog))
		case <-tick.C:
		}
	}
}

package consensus

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter sends hashicorp/raft's (and raft-wal's) hclog output to a slog.Logger. Trace
// maps below slog's Debug; the slog handler's level decides what is printed.
type hclogAdapter struct {
	l     *slog.Logger
	name  string
	args  []any
	level hclog.Level
}

// NewHCLogger adapts l to hclog.Logger for the raft libraries.
func NewHCLogger(l *slog.Logger) hclog.Logger {
	return &hclogAdapter{l: l, level: hclog.Trace}
}

const slogTrace = slog.LevelDebug - 4

func toSlog(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slogTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off || level < a.level {
		return
	}
	if a.name != "" {
		args = append(args, "raft_logger", a.name)
	}
	a.l.Log(context.Background(), toSlog(level), msg, append(a.args[:len(a.args):len(a.args)], args...)...)
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) enabled(level hclog.Level) bool {
	return level >= a.level && a.l.Enabled(context.Background(), toSlog(level))
}

func (a *hclogAdapter) IsTrace() bool { return a.enabled(hclog.Trace) }
func (a *hclogAdapter) IsDebug() bool { return a.enabled(hclog.Debug) }
func (a *hclogAdapter) IsInfo() bool  { return a.enabled(hclog.Info) }
func (a *hclogAdapter) IsWarn() bool  { return a.enabled(hclog.Warn) }
func (a *hclogAdapter) IsError() bool { return a.enabled(hclog.Error) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.args }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	c := *a
	c.args = append(a.args[:len(a.args):len(a.args)], args...)
	return &c
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	if a.name != "" {
		name = a.name + "." + name
	}
	return a.ResetNamed(name)
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	c := *a
	c.name = name
	return &c
}

func (a *hclogAdapter) SetLevel(level hclog.Level) { a.level = level }
func (a *hclogAdapter) GetLevel() hclog.Level      { return a.level }

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		msg := strings.TrimSpace(string(bytes.TrimRight(p, "\n")))
		level := hclog.Info
		for prefix, l := range map[string]hclog.Level{"[ERR]": hclog.Error, "[ERROR]": hclog.Error, "[WARN]": hclog.Warn, "[DEBUG]": hclog.Debug, "[TRACE]": hclog.Trace} {
			if rest, ok := strings.CutPrefix(msg, prefix); ok {
				level, msg = l, strings.TrimSpace(rest)
			}
		}
		a.Log(level, msg)
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

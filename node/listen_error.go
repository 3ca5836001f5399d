package node

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/meshnode/meshnode/mesh"
)

// Listener names one of the node's listening sockets.
type Listener string

// The node's listeners, by the Config field that sets each one's address.
const (
	ListenerMesh Listener = "mesh"       // Config.Listen
	ListenerData Listener = "data plane" // Config.DataListen
	ListenerAPI  Listener = "API"        // Config.API
)

// ErrAddrInUse matches the error of a listener that could not bind its address because
// another socket holds it.
var ErrAddrInUse = errors.New("address already in use")

// AddrInUseError says which of the node's listeners could not bind its address because
// another socket (often another node on the same host) holds it. It matches ErrAddrInUse
// and the underlying error.
type AddrInUseError struct {
	Listener Listener
	Addr     string // the address as configured
	Err      error
}

func (e *AddrInUseError) Error() string {
	return fmt.Sprintf("%s address %s is already in use (another meshnode on this host?)", e.Listener, e.Addr)
}

// Unwrap returns ErrAddrInUse and the listener's error.
func (e *AddrInUseError) Unwrap() []error { return []error{ErrAddrInUse, e.Err} }

// addrInUse returns err as an *AddrInUseError of listener l on addr when it is a bind
// that failed because the address is in use, and err unchanged otherwise. go-libp2p
// reports its listeners' failures as text, hence the match on the message too.
func addrInUse(l Listener, addr string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use") {
		return &AddrInUseError{Listener: l, Addr: addr, Err: err}
	}
	return err
}

// meshListenAddrs is how a mesh-listener error names the addresses: the configured ones,
// or the default port.
func (c Config) meshListenAddrs() string {
	if len(c.Listen) == 0 {
		return "port " + strconv.Itoa(mesh.DefaultPort)
	}
	return strings.Join(c.Listen, ",")
}

package faultproxy

import (
	"net"
	"sync"
)

// Processes names a connection by the process at its other end, among the
// processes it was told of: a Namer for StartNamed. It works on Linux,
// where /proc shows which process holds a connection's other socket (see
// name); elsewhere every name is "".
type Processes struct {
	mu    sync.Mutex
	names map[int]string // by process id
}

// Set names the process pid.
func (ps *Processes) Set(pid int, name string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.names == nil {
		ps.names = map[int]string{}
	}
	ps.names[pid] = name
}

// Name is the name of the process that holds c's other end, or "" when
// it is none of those named by Set (or c is no longer open there).
func (ps *Processes) Name(c net.Conn) string {
	ps.mu.Lock()
	names := make(map[int]string, len(ps.names))
	for pid, n := range ps.names {
		names[pid] = n
	}
	ps.mu.Unlock()
	return name(c, names)
}

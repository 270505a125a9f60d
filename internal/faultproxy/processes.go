package faultproxy

import (
	"net"
	"sync"
)

// Processes names a connection by the process at its other end, among the
// processes it was told of: a Namer for StartNamed. It works on Linux,
// where /proc shows which process holds a connection's other socket (see
// name); elsewhere every name is "".
//
// A proxy asks again about a connection it could not name each time the
// connection's bytes cross, so that a process named after it connected is
// recognised: the answer "" is kept, per connection, until Set names
// another process, and asking again costs nothing until then.
type Processes struct {
	mu     sync.Mutex
	names  map[int]string // by process id
	gen    int            // Set's calls
	misses map[string]int // connection (its two addresses) -> gen of its last unnamed look
}

// Set names the process pid.
func (ps *Processes) Set(pid int, name string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.names == nil {
		ps.names = map[int]string{}
	}
	ps.names[pid] = name
	ps.gen++
}

// Name is the name of the process that holds c's other end, or "" when
// it is none of those named by Set (or c is no longer open there).
func (ps *Processes) Name(c net.Conn) string {
	key := c.RemoteAddr().String() + ">" + c.LocalAddr().String()
	ps.mu.Lock()
	gen := ps.gen
	if g, ok := ps.misses[key]; ok && g == gen {
		ps.mu.Unlock()
		return ""
	}
	names := make(map[int]string, len(ps.names))
	for pid, n := range ps.names {
		names[pid] = n
	}
	ps.mu.Unlock()
	n := name(c, names)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if n == "" {
		if ps.misses == nil {
			ps.misses = map[string]int{}
		}
		ps.misses[key] = gen
	} else {
		delete(ps.misses, key)
	}
	return n
}

package procutil

import (
	"bytes"
	"fmt"
	"net"
	"sync"
)

// FreePort asks the kernel for a free 127.0.0.1 TCP port, for a child
// server to listen on.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// TailBuffer keeps the last Max bytes written to it: a child's output, to
// show when it fails, without growing with a long run.
type TailBuffer struct {
	Max int
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *TailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - b.Max; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *TailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

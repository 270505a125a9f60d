package faultproxy

import (
	"net"
	"syscall"
)

// write sends b on c with MSG_NOSIGNAL: a write to a connection its peer
// has reset fails with EPIPE instead of raising SIGPIPE, which a program
// that listens for SIGPIPE (the demo, to stop when its output is cut)
// would take for its own.
func write(c net.Conn, b []byte) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		_, err := c.Write(b)
		return err
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	for len(b) > 0 {
		var n int
		var werr error
		if err := rc.Write(func(fd uintptr) bool {
			n, werr = syscall.SendmsgN(int(fd), b, nil, nil, syscall.MSG_NOSIGNAL)
			return werr != syscall.EAGAIN
		}); err != nil {
			return err
		}
		if werr != nil {
			return werr
		}
		b = b[n:]
	}
	return nil
}

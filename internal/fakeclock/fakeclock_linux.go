//go:build linux

package fakeclock

import (
	"os"
	"syscall"
)

// supported is nil on Linux.
func supported() error { return nil }

// mapShared maps the first n bytes of f, shared with every process that
// maps it.
func mapShared(f *os.File, n int) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

func unmap(mem []byte) error { return syscall.Munmap(mem) }

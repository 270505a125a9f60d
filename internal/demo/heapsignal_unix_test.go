//go:build unix

package demo

import (
	"os"
	"os/signal"
	"syscall"
)

// notifyHeapSignal relays SIGUSR1, the heap signal, to sig.
func notifyHeapSignal(sig chan os.Signal) bool {
	signal.Notify(sig, syscall.SIGUSR1)
	return true
}

// sendHeapSignal asks process pid for its heap report.
func sendHeapSignal(pid int) error { return syscall.Kill(pid, syscall.SIGUSR1) }

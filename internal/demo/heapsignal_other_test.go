//go:build !unix

package demo

import (
	"errors"
	"fmt"
	"os"
	"runtime"
)

// notifyHeapSignal: there is no SIGUSR1 to listen for.
func notifyHeapSignal(chan os.Signal) bool { return false }

// sendHeapSignal: without SIGUSR1, a replica cannot be asked for its heap.
func sendHeapSignal(int) error {
	return fmt.Errorf("a replica's heap is asked for with SIGUSR1, which %s lacks: %w", runtime.GOOS, errors.ErrUnsupported)
}

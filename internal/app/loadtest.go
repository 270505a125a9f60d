package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/seckill-ref/seckill/loadtest"
)

// ExitError carries a subcommand's exit status to main, for commands whose
// status means something beyond failure: loadtest exits 1 for an oversell
// and 2 for a usage or connection error. The command has already said why.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// loadtestCmd is "seckill loadtest": package loadtest's command line. A
// Ctrl-C stops the attack; the sale is still read back and checked.
func loadtestCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if code := loadtest.Main(ctx, args, getenv, stdout, stderr); code != loadtest.ExitOK {
		return ExitError{Code: code}
	}
	return nil
}

// Command seckill is a flash-sale service whose purchases are guarded by a
// Redis distributed lock with fencing tokens. See internal/app for the
// subcommands and settings.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/demo"
)

func main() {
	// The demo is wired here, not in app's table: it builds replicas with
	// app.NewServer, so app cannot import it.
	err := app.Run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr, demo.Command())
	var exit app.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.Code) // the command has said why
	case err != nil:
		fmt.Fprintf(os.Stderr, "seckill: %v\n", err)
		os.Exit(1)
	}
}

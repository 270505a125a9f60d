// Command seckill is a flash-sale service whose purchases are guarded by a
// Redis distributed lock with fencing tokens. See internal/app for the
// subcommands and settings.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/seckill-ref/seckill/internal/app"
)

func main() {
	if err := app.Run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "seckill: %v\n", err)
		os.Exit(1)
	}
}

// Command seckill is a flash-sale service whose purchases are guarded by a
// Redis distributed lock with fencing tokens. Its subcommands are listed in
// commands below; "seckill help" prints them, "seckill <command> -h" a
// command's flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/demo"
	"github.com/seckill-ref/seckill/loadtest"
)

// command is one subcommand. run gets the arguments after the command's
// name, reads the environment only through getenv, and returns the exit
// status, after saying why on stderr when it is not 0.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int
}

// commands lists the subcommands; the first is the default.
var commands = []command{
	{"serve", "run the HTTP API (the default)", serve},
	{"loadtest", "run a flash sale against running replicas and check that nothing is oversold", loadtestCmd},
	{"demo", "start Redis and two replicas, run a flash sale on them, check it, clean up", demo.Command(serveCommand)},
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run runs the program with its command-line arguments (without the program
// name) and returns the exit status. The first argument names a subcommand;
// without one, or when it starts with "-", it is serve. It reads the
// environment only through getenv and writes only to stdout and stderr, so
// that a test can run it like a process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cmd := commands[0]
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name := args[0]
		args = args[1:]
		if name == "help" {
			usage(stdout)
			return 0
		}
		found := false
		for _, c := range commands {
			if c.name == name {
				cmd, found = c, true
			}
		}
		if !found {
			usage(stderr)
			fmt.Fprintf(stderr, "seckill: unknown command %q\n", name)
			return 1
		}
	}
	return cmd.run(ctx, args, getenv, stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: seckill [command] [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun seckill <command> -h for a command's flags.")
}

// serve is "seckill serve": app.Main, whose error is the one line that says
// why it stopped.
func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if err := app.Main(ctx, args, getenv, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "seckill: %v\n", err)
		return 1
	}
	return 0
}

// serveCommand is this binary's serve command, configured by the
// environment: how the demo starts a replica as a process of its own.
func serveCommand() (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program to start replicas: %w", err)
	}
	return exec.Command(exe, "serve"), nil
}

// loadtestCmd is "seckill loadtest": package loadtest's command line. A
// Ctrl-C stops the attack; the sale is still read back and checked.
func loadtestCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return loadtest.Main(ctx, args, getenv, stdout, stderr)
}

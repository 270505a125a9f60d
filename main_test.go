package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The command table: help lists every command, a name dispatches to its
// command with the remaining arguments, no name (or a flag first) means
// serve, and an unknown name is a usage error. Each case tells the
// commands apart by their -h text and their exit status for a bad flag
// (serve 1, loadtest and demo 2), so a dispatch to the wrong command fails.
func TestRun(t *testing.T) {
	for _, tc := range []struct {
		args         []string
		code         int
		stdout       []string
		stderr       []string
		stdoutAbsent bool
	}{
		{args: []string{"help"}, stdout: []string{"usage: seckill [command]", "serve", "loadtest", "demo", "the default"}},
		{args: []string{"frobnicate"}, code: 1, stderr: []string{"usage: seckill [command]", `seckill: unknown command "frobnicate"`}, stdoutAbsent: true},
		{args: []string{"-h"}, stderr: []string{"-redis-addr", "-admin-token"}},
		{args: []string{"serve", "-h"}, stderr: []string{"-redis-addr", "-admin-token"}},
		{args: []string{"serve", "-lock", "bogus"}, code: 1, stderr: []string{`seckill: lock mode "bogus"`}},
		{args: []string{"-lock", "bogus"}, code: 1, stderr: []string{`seckill: lock mode "bogus"`}},
		{args: []string{"loadtest", "-h"}, stderr: []string{"Usage: seckill loadtest"}},
		{args: []string{"loadtest", "-bogus"}, code: 2, stderr: []string{"-bogus"}},
		{args: []string{"demo", "-h"}, stderr: []string{"Usage: seckill demo"}},
		{args: []string{"demo", "stray"}, code: 2, stderr: []string{`demo: unexpected argument "stray"`}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			getenv := func(string) string { return "" }
			code := run(context.Background(), tc.args, getenv, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit status: got %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			for _, want := range tc.stdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout does not contain %q:\n%s", want, stdout.String())
				}
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr does not contain %q:\n%s", want, stderr.String())
				}
			}
			if tc.stdoutAbsent && stdout.Len() > 0 {
				t.Errorf("stdout: got %q, want nothing", stdout.String())
			}
		})
	}
}

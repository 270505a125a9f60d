// Package once sends Redis scripts that must not run twice. go-redis
// sends a command again when its reply is lost (a broken connection, a
// read timeout), and the first run may well have happened; a script cannot
// tell a retry from a first run. An acquire run twice, the second time
// after its lock was released, would take the lock again for nobody. The
// lock's calls that must not run twice go through here, and their callers
// handle the unknown outcome instead.
package once

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Script is a redis.Script that keeps its source, to send it without
// go-redis's retries (Run).
type Script struct {
	*redis.Script
	Src string
}

// NewScript is the script of src.
func NewScript(src string) *Script { return &Script{redis.NewScript(src), src} }

// onceCmd is a command go-redis must not send a second time. go-redis
// sends a command again when its reply is lost (a broken connection, a
// read timeout), and the first run may well have happened; a script
// cannot tell a retry from a first run. The scripts that must not run
// twice are sent as onceCmd, whose NoRetry tells go-redis (Client,
// ClusterClient and Ring alike) to return the error instead; the caller
// then handles the unknown outcome. A Cluster redirect (MOVED, ASK) is
// still followed: the redirected command did not run.
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

// Run runs s as redis.Script.Run does (EVALSHA, then EVAL on NOSCRIPT, which means
// it did not run), but never lets go-redis send it twice: an error other
// than a script error means it ran once or not at all. retry (a test's
// control) lets go-redis retry it.
func Run(ctx context.Context, c redis.UniversalClient, s *Script, retry bool, keys []string, args ...any) *redis.Cmd {
	if retry {
		return s.Run(ctx, c, keys, args...)
	}
	cmd := evalCmd(ctx, "evalsha", s.Hash(), keys, args)
	_ = c.Process(ctx, onceCmd{cmd})
	if cmd.Err() != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = evalCmd(ctx, "eval", s.Src, keys, args)
		_ = c.Process(ctx, onceCmd{cmd})
	}
	return cmd
}

// RunAll is Run for len(cmds) calls of s in one pipeline (on a
// ClusterClient, one per master the keys belong to): call i has keysOf(i)
// and argsOf(i), and cmds[i] gets its command. The calls the server did
// not know the script for are sent again with EVAL, in a second pipeline.
func RunAll(ctx context.Context, c redis.UniversalClient, s *Script, cmds []*redis.Cmd, keysOf func(int) []string, argsOf func(int) []any) {
	run := func(verb, script string, which []int) {
		pipe := c.Pipeline()
		for _, i := range which {
			cmds[i] = evalCmd(ctx, verb, script, keysOf(i), argsOf(i))
			_ = pipe.Process(ctx, onceCmd{cmds[i]})
		}
		_, _ = pipe.Exec(ctx) // each command has its own error
	}
	all := make([]int, len(cmds))
	for i := range all {
		all[i] = i
	}
	run("evalsha", s.Hash(), all)
	var unknown []int
	for i, cmd := range cmds {
		if cmd.Err() != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			unknown = append(unknown, i)
		}
	}
	if len(unknown) > 0 {
		run("eval", s.Src, unknown)
	}
}

func evalCmd(ctx context.Context, verb, script string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, verb, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return redis.NewCmd(ctx, append(a, args...)...)
}

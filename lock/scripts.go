package lock

import (
	"context"
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts are loaded once per server: redis.Script runs EVALSHA and falls
// back to EVAL (which also caches the script) when the server answers
// NOSCRIPT, for example after a restart. Each step of the lock is one script,
// so each is atomic and costs one round trip. Each file in lua/ is a whole
// script, as Redis runs it; acquire, release and withdraw (and their
// counter-token variants) are put together from the shared parts in
// lua/parts/ (see scripts_gen_test.go), and a test keeps them up to date.
var (
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/withdraw.lua
	withdrawLua string
	//go:embed lua/acquire_counter_tokens.lua
	acquireCounterTokensLua string
	//go:embed lua/release_counter_tokens.lua
	releaseCounterTokensLua string
	//go:embed lua/withdraw_counter_tokens.lua
	withdrawCounterTokensLua string
	//go:embed lua/extend.lua
	extendLua string
	//go:embed lua/redlock_withdraw.lua
	redlockWithdrawLua string
	//go:embed lua/raise_fence.lua
	raiseFenceLua string

	extendScript          = redis.NewScript(extendLua)
	redlockWithdrawScript = redis.NewScript(redlockWithdrawLua)
	raiseFenceScript      = redis.NewScript(raiseFenceLua)

	// safeScripts are the lock's scripts; counterTokenScripts issue tokens
	// by the unsafe rule of Options.UnsafeCounterTokens.
	safeScripts         = newScriptSet(acquireLua, releaseLua, withdrawLua)
	counterTokenScripts = newScriptSet(acquireCounterTokensLua, releaseCounterTokensLua, withdrawCounterTokensLua)
)

func newScriptSet(acquire, release, withdraw string) *scriptSet {
	return &scriptSet{acquire: newScript(acquire), release: newScript(release), withdraw: newScript(withdraw)}
}

// scriptSet is the scripts that issue tokens and hand the lock over.
type scriptSet struct {
	acquire, release, withdraw *script
}

// script is a redis.Script that keeps its source, to send it without
// go-redis's retries (runOnce).
type script struct {
	*redis.Script
	src string
}

func newScript(src string) *script { return &script{redis.NewScript(src), src} }

// onceCmd is a command go-redis must not send a second time. go-redis sends
// a command again when its reply is lost (a broken connection, a read
// timeout: up to Options.MaxRetries more times, 3 by default), and the
// first run may well have happened. A retry cannot be told from a first
// run inside a script, so the scripts that must not run twice are sent as
// onceCmd, whose NoRetry tells go-redis (redis.Client, ClusterClient and
// Ring alike) to return the error instead; the Locker then handles the
// unknown outcome itself. A Cluster redirect (MOVED, ASK) is still
// followed: the redirected command did not run.
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

// runOnce runs s as Run does (EVALSHA, and EVAL when the server does not
// know the script: NOSCRIPT means it did not run), but never lets go-redis
// send it twice. An error other than a script error then means the script
// ran once or not at all, and the caller cannot tell which.
func runOnce(ctx context.Context, c redis.UniversalClient, s *script, keys []string, args ...any) *redis.Cmd {
	if hooks.retryScriptCalls {
		return s.Run(ctx, c, keys, args...)
	}
	cmd := evalCmd(ctx, "evalsha", s.Hash(), keys, args)
	_ = c.Process(ctx, onceCmd{cmd})
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = evalCmd(ctx, "eval", s.src, keys, args)
		_ = c.Process(ctx, onceCmd{cmd})
	}
	return cmd
}

// runAllOnce is runOnce for len(cmds) calls of s, sent in one pipeline
// (on a ClusterClient, one per master the keys belong to), so that they
// cost one round trip: call i has keysOf(i) and argsOf(i), and cmds[i]
// gets its command. The pipeline is not retried by go-redis (it holds
// onceCmds); the calls the server did not know the script for (NOSCRIPT:
// they did not run) are sent again with EVAL, in a second pipeline.
func runAllOnce(ctx context.Context, c redis.UniversalClient, s *script, cmds []*redis.Cmd, keysOf func(int) []string, argsOf func(int) []any) {
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
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			unknown = append(unknown, i)
		}
	}
	if len(unknown) > 0 {
		run("eval", s.src, unknown)
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

// scripts is the script set these options select.
func (o Options) scripts() *scriptSet {
	switch {
	case o.UnsafeCounterTokens:
		return counterTokenScripts
	case hooks.scripts != nil:
		return hooks.scripts
	}
	return safeScripts
}

package core

import (
	"context"
	_ "embed"

	"github.com/redis/go-redis/v9"
)

//go:generate go run gen.go

// The scripts are loaded once per server: redis.Script runs EVALSHA and
// falls back to EVAL when the server answers NOSCRIPT (after a restart).
// Each step of the lock is one script, so each is atomic and costs one
// round trip. Each file in lua/ is a whole script, as Redis runs it;
// acquire, release and withdraw (and their counter-token variants) are
// generated from lua/parts/ (go generate; package luagen says how).
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

	// ExtendScript resets an owner's lease (lua/extend.lua).
	ExtendScript = redis.NewScript(extendLua)
	// SafeScripts are the lock's scripts; CounterTokenScripts issue tokens
	// by the unsafe rule of Options.UnsafeCounterTokens.
	SafeScripts         = NewScripts(acquireLua, releaseLua, withdrawLua)
	CounterTokenScripts = NewScripts(acquireCounterTokensLua, releaseCounterTokensLua, withdrawCounterTokensLua)
)

// Scripts are the scripts that issue tokens and hand the lock over.
type Scripts struct{ Acquire, Release, Withdraw *Script }

// NewScripts compiles the three scripts from their sources.
func NewScripts(acquire, release, withdraw string) *Scripts {
	return &Scripts{Acquire: newScript(acquire), Release: newScript(release), Withdraw: newScript(withdraw)}
}

// Script is a redis.Script that keeps its source, to send it without
// go-redis's retries (runOnce).
type Script struct {
	*redis.Script
	Src string
}

func newScript(src string) *Script { return &Script{redis.NewScript(src), src} }

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

// runOnce runs s as Run does (EVALSHA, then EVAL on NOSCRIPT, which means
// it did not run), but never lets go-redis send it twice: an error other
// than a script error means it ran once or not at all. retry (a test's
// control) lets go-redis retry it.
func runOnce(ctx context.Context, c redis.UniversalClient, s *Script, retry bool, keys []string, args ...any) *redis.Cmd {
	if retry {
		return s.Run(ctx, c, keys, args...)
	}
	cmd := evalCmd(ctx, "evalsha", s.Hash(), keys, args)
	_ = c.Process(ctx, onceCmd{cmd})
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = evalCmd(ctx, "eval", s.Src, keys, args)
		_ = c.Process(ctx, onceCmd{cmd})
	}
	return cmd
}

// runAllOnce is runOnce for len(cmds) calls of s in one pipeline (on a
// ClusterClient, one per master the keys belong to): call i has keysOf(i)
// and argsOf(i), and cmds[i] gets its command. The calls the server did
// not know the script for are sent again with EVAL, in a second pipeline.
func runAllOnce(ctx context.Context, c redis.UniversalClient, s *Script, cmds []*redis.Cmd, keysOf func(int) []string, argsOf func(int) []any) {
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

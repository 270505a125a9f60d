package lock

import (
	"context"
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts are loaded once per server: redis.Script runs EVALSHA and falls
// back to EVAL (which also caches the script) when the server answers
// NOSCRIPT, for example after a restart. Each step of the lock is one script,
// so each is atomic and costs one round trip.
var (
	//go:embed lua/token.lua
	tokenLua string
	//go:embed lua/common.lua
	commonLua string
	//go:embed lua/acquire_fast.lua
	acquireFastLua string
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/release_fast.lua
	releaseFastLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/withdraw.lua
	withdrawLua string
	//go:embed lua/extend.lua
	extendLua string
	//go:embed lua/redlock_withdraw.lua
	redlockWithdrawLua string
	//go:embed lua/raise_fence.lua
	raiseFenceLua string
	//go:embed lua/unsafe_counter_tokens.lua
	unsafeCounterTokensLua string

	extendScript          = redis.NewScript(extendLua)
	redlockWithdrawScript = redis.NewScript(redlockWithdrawLua)
	raiseFenceScript      = redis.NewScript(raiseFenceLua)

	// safeScripts are the lock's scripts; counterTokenScripts issue tokens
	// by the unsafe rule of Options.UnsafeCounterTokens.
	safeScripts         = newScriptSet("", "")
	counterTokenScripts = newScriptSet(unsafeCounterTokensLua, "")
)

// scriptSet is the scripts built on common.lua: the ones that issue tokens
// and hand the lock over.
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
	if testRetryScriptCalls {
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

func evalCmd(ctx context.Context, verb, script string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, verb, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return redis.NewCmd(ctx, append(a, args...)...)
}

// testRetryScriptCalls lets a test send every script call through
// go-redis's ordinary retries, to show the failure runOnce prevents.
var testRetryScriptCalls = false

// newScriptSet builds the scripts built on common.lua. Each is, in order:
//
//   - the release's fast path (release_fast.lua), which issues no token and
//     so runs before any function below is defined;
//   - token.lua, the clock and the fencing token, then tokenRule, which may
//     replace its functions (Options.UnsafeCounterTokens);
//   - the acquire's fast path (acquire_fast.lua), which issues a token by
//     that rule;
//   - its general path, wrapped in a function that only the cases the fast
//     path left run: common.lua, then rule, which may replace common.lua's
//     functions, then the script's own text. Lua defines a function's local
//     functions only when it runs, so the fast path pays for none of
//     common.lua's helpers.
//
// The fast paths settle the uncontended case and return.
func newScriptSet(tokenRule, rule string) *scriptSet {
	build := func(beforeToken, fast, general string) *script {
		return newScript(beforeToken + tokenLua + tokenRule + fast +
			"local function general()\n" + commonLua + rule + general + "\nend\nreturn general()\n")
	}
	return &scriptSet{
		acquire:  build("", acquireFastLua, acquireLua),
		release:  build(releaseFastLua, "", releaseLua),
		withdraw: build("", "", withdrawLua),
	}
}

// scripts is the script set these options select.
func (o Options) scripts() *scriptSet {
	if o.UnsafeCounterTokens {
		return counterTokenScripts
	}
	return safeScripts
}

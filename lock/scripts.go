package lock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts are loaded once per server: redis.Script runs EVALSHA and falls
// back to EVAL (which also caches the script) when the server answers
// NOSCRIPT, for example after a restart. Each step of the lock is one script,
// so each is atomic and costs one round trip.
var (
	//go:embed lua/common.lua
	commonLua string
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/withdraw.lua
	withdrawLua string
	//go:embed lua/extend.lua
	extendLua string
	//go:embed lua/wake_release.lua
	wakeReleaseLua string
	//go:embed lua/raise_fence.lua
	raiseFenceLua string
	//go:embed lua/unsafe_counter_tokens.lua
	unsafeCounterTokensLua string

	extendScript      = redis.NewScript(extendLua)
	wakeReleaseScript = redis.NewScript(wakeReleaseLua)
	raiseFenceScript  = redis.NewScript(raiseFenceLua)

	// safeScripts are the lock's scripts; counterTokenScripts issue tokens
	// by the unsafe rule of Options.UnsafeCounterTokens.
	safeScripts         = newScriptSet("")
	counterTokenScripts = newScriptSet(unsafeCounterTokensLua)
)

// scriptSet is the scripts built on common.lua: the ones that issue tokens
// and hand the lock over.
type scriptSet struct {
	acquire, release, withdraw *redis.Script
}

// newScriptSet builds the scripts with override placed between common.lua
// and each script's own text, where it may replace the functions that
// common.lua defines (the token rule).
func newScriptSet(override string) *scriptSet {
	head := commonLua + override
	return &scriptSet{
		acquire:  redis.NewScript(head + acquireLua),
		release:  redis.NewScript(head + releaseLua),
		withdraw: redis.NewScript(head + withdrawLua),
	}
}

// scripts is the script set these options select.
func (o Options) scripts() *scriptSet {
	if o.UnsafeCounterTokens {
		return counterTokenScripts
	}
	return safeScripts
}

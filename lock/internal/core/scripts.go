package core

import (
	_ "embed"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock/internal/core/once"
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
type Scripts struct{ Acquire, Release, Withdraw *once.Script }

// NewScripts compiles the three scripts from their sources.
func NewScripts(acquire, release, withdraw string) *Scripts {
	return &Scripts{Acquire: once.NewScript(acquire), Release: once.NewScript(release), Withdraw: once.NewScript(withdraw)}
}

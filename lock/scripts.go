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

	acquireScript  = redis.NewScript(commonLua + acquireLua)
	releaseScript  = redis.NewScript(commonLua + releaseLua)
	withdrawScript = redis.NewScript(commonLua + withdrawLua)
	extendScript   = redis.NewScript(extendLua)

	wakeReleaseScript = redis.NewScript(wakeReleaseLua)
	raiseFenceScript  = redis.NewScript(raiseFenceLua)
)

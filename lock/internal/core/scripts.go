package core

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock/internal/core/once"
)

//go:generate go run gen.go -part token.lua=lua/token.lua lua/acquire.lua

// The scripts, one file each in lua/, as Redis runs them. Each step of the
// lock is one script, so each is atomic and costs one round trip; they are
// sent with EVALSHA, and with EVAL when the server does not know them yet
// (after a restart).
var (
	// AcquireLua is lua/acquire.lua, with the lock's own token rule.
	//go:embed lua/acquire.lua
	AcquireLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/extend.lua
	extendLua string
	//go:embed lua/abandon.lua
	abandonLua string

	// TokenLua is the rule that issues fencing tokens (lua/token.lua).
	// Every script that gives the lock to someone, here and in the layers
	// above, carries a copy of it (Splice).
	//go:embed lua/token.lua
	TokenLua string

	// CounterTokensLua is the UNSAFE rule of Options.UnsafeCounterTokens,
	// spliced into every script in place of TokenLua
	// (lua/counter_tokens.lua).
	//go:embed lua/counter_tokens.lua
	CounterTokensLua string

	// ExtendScript resets an owner's lease (lua/extend.lua).
	ExtendScript = redis.NewScript(extendLua)
)

// Scripts are the core's scripts, compiled.
type Scripts struct {
	acquire, release, abandon *once.Script
}

// NewScripts compiles the core's scripts, with acquire as the acquire
// script's source: AcquireLua, or a variant with another token rule
// (Splice).
func NewScripts(acquire string) *Scripts {
	return &Scripts{acquire: once.NewScript(acquire), release: once.NewScript(releaseLua), abandon: once.NewScript(abandonLua)}
}

// DefaultScripts are the scripts as committed.
var DefaultScripts = NewScripts(AcquireLua)

// Hashes are the SHA1s by which the scripts are sent, by name, for tests
// that tell the lock's calls apart on the wire.
func (s *Scripts) Hashes() map[string]string {
	return map[string]string{"acquire": s.acquire.Hash(), "release": s.release.Hash(),
		"abandon": s.abandon.Hash(), "extend": ExtendScript.Hash()}
}

// Sources are the scripts' sources, to load them into a server's cache.
func (s *Scripts) Sources() []string {
	return []string{s.acquire.Src, s.release.Src, s.abandon.Src, extendLua}
}

// Splice returns script with its copy of the shared file part (the lines
// between "-- >>> part" and "-- <<< part") replaced by body. A script that
// carries no copy of part is an error. The committed scripts' copies are
// kept in step with their files by go generate (gen.go), and checked by
// the tests of each package that has scripts.
func Splice(script, part, body string) (string, error) {
	begin := strings.Index(script, "-- >>> "+part)
	end := strings.Index(script, "-- <<< "+part)
	if begin < 0 || end < begin {
		return "", fmt.Errorf("the script carries no copy of %s", part)
	}
	begin += strings.IndexByte(script[begin:], '\n') + 1
	return script[:begin] + body + script[end:], nil
}

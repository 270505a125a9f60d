// Package queue is the lock's line of waiting processes, in Redis: a
// process that finds the lock held joins the line under a ticket (a fresh
// UUID, the owner its acquisition will have), and a release gives the lock
// to the oldest live process in line in the same script, so that processes
// are served in turn, and the next holder needs no round trip of its own
// (the grant reaches it as a message on the lock's channel, or in the
// reply of its own call). Over package core, it adds the line and nothing
// else: no goroutine, no state in the process. Package handoff drives it,
// and listens for the grants (package subscription).
//
// Each call is one script in lua/, which names its keys and arguments at
// its top; the line's shared functions are lua/line.lua, copied into each.
package queue

import (
	_ "embed"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/core/once"
)

//go:generate go run ../core/gen.go -part token.lua=../core/lua/token.lua -part line.lua=lua/line.lua lua/wait.lua lua/release.lua lua/withdraw.lua

// Keys are a lock's keys, core's and the line's, all under the lock's hash
// tag. The channel is not a key, but follows the same scheme.
type Keys struct {
	core.Keys
	Queue   string // the ids of the waiting processes, oldest first
	Waiters string // each waiting process's entry: expiry, leases, ticket
	Channel string // grants to waiting processes are published here
}

// NewKeys returns the keys of the lock called name under prefix: core's,
// then the line's, each the lock's key and a suffix.
func NewKeys(prefix, name string) Keys {
	// One string for all five, cut into them: a Locker makes the keys of a
	// name every time it goes from idle to busy, and this is one allocation.
	suffixes := [...]string{"", ":fence", ":queue", ":waiters", ":grant"}
	tag := len(prefix) + len(name) + 2 // prefix{name}
	var b strings.Builder
	b.Grow(len(suffixes)*tag + len(":fence:queue:waiters:grant"))
	for _, suffix := range suffixes {
		b.WriteString(prefix)
		b.WriteByte('{')
		b.WriteString(name)
		b.WriteByte('}')
		b.WriteString(suffix)
	}
	all := b.String()
	cut := func(suffix string) string {
		s := all[:tag+len(suffix)]
		all = all[len(s):]
		return s
	}
	return Keys{
		Keys:    core.Keys{Name: name, Lock: cut(""), Fence: cut(":fence")},
		Queue:   cut(":queue"),
		Waiters: cut(":waiters"),
		Channel: cut(":grant"),
	}
}

// scriptKeys are the KEYS of every script of the line, for ticket.
func (k Keys) scriptKeys(ticket string) []string {
	return []string{k.Lock, k.Fence, k.Queue, k.Waiters, k.Tombstone(ticket)}
}

// The scripts' sources, with the lock's own token rule (core.TokenLua).
var (
	//go:embed lua/wait.lua
	WaitLua string
	//go:embed lua/release.lua
	ReleaseLua string
	//go:embed lua/withdraw.lua
	WithdrawLua string
	//go:embed lua/unlock.lua
	UnlockLua string
)

// Scripts are the line's scripts, compiled.
type Scripts struct{ wait, release, withdraw, unlock *once.Script }

// NewScripts compiles the scripts from their sources: WaitLua, ReleaseLua,
// WithdrawLua and UnlockLua, or variants with another token rule
// (core.Splice; unlock.lua issues no token).
func NewScripts(wait, release, withdraw, unlock string) *Scripts {
	return &Scripts{once.NewScript(wait), once.NewScript(release), once.NewScript(withdraw), once.NewScript(unlock)}
}

// DefaultScripts are the scripts as committed.
var DefaultScripts = NewScripts(WaitLua, ReleaseLua, WithdrawLua, UnlockLua)

// Hashes are the SHA1s by which the scripts are sent, by name.
func (s *Scripts) Hashes() map[string]string {
	return map[string]string{"wait": s.wait.Hash(), "release": s.release.Hash(), "withdraw": s.withdraw.Hash(), "unlock": s.unlock.Hash()}
}

// Sources are the scripts' sources, to load them into a server's cache.
func (s *Scripts) Sources() []string {
	return []string{s.wait.Src, s.release.Src, s.withdraw.Src, s.unlock.Src}
}

// Config is what a Queue needs of the lock's options.
type Config struct {
	TTL        time.Duration // the lease of an acquisition
	EntryLease time.Duration // a waiting process's place lasts this long unrefreshed
	FenceTTL   time.Duration // the fence counter's lifetime; 0: for ever
	// Reserve is how many tokens a grant, or a lock kept for the process's
	// next goroutine, sets aside after the one it issues (line.lua).
	Reserve int
	Scripts *Scripts // nil: DefaultScripts
	// RetryScriptCalls (a test's control) lets go-redis send every call
	// again when its reply is lost.
	RetryScriptCalls bool
}

// Queue is the line of the locks in one Redis deployment, as one process
// (pid) stands in it.
type Queue struct {
	rdb     redis.UniversalClient
	cfg     Config
	scripts *Scripts
	// The scripts' constant arguments, as interfaces once: go-redis would
	// otherwise allocate for each, on every call.
	pid, ttl, lease, fenceTTL, reserve any
}

// New returns the line of the deployment behind rdb, for the process pid.
func New(rdb redis.UniversalClient, cfg Config, pid string) *Queue {
	if cfg.Scripts == nil {
		cfg.Scripts = DefaultScripts
	}
	return &Queue{rdb: rdb, cfg: cfg, scripts: cfg.Scripts, pid: pid, ttl: cfg.TTL.Milliseconds(),
		lease: cfg.EntryLease.Milliseconds(), fenceTTL: cfg.FenceTTL.Milliseconds(), reserve: cfg.Reserve}
}

// ParseGrant splits a grant message, "<pid> <ticket> <token> <last>"
// (line.lua, grant_next), where last is the last token reserved with the
// grant's own; a message of three fields reserves none.
func ParseGrant(payload string) (pid, ticket string, token, last int64, ok bool) {
	f := strings.Fields(payload)
	if len(f) == 3 {
		f = append(f, f[2])
	}
	if len(f) != 4 {
		return "", "", 0, 0, false
	}
	token, err1 := strconv.ParseInt(f[2], 10, 64)
	last, err2 := strconv.ParseInt(f[3], 10, 64)
	return f[0], f[1], token, last, err1 == nil && err2 == nil && last >= token
}

package lock

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/core/luagen"
)

// controls are the test switches the Lockers that the tests create from
// now on get (NewForTest, NewRedlockForTest). The switches below set them
// for a test and restore them after; the lock itself reads only each
// Locker's own copy.
var controls testControls

// NewForTest is New, with the switches set now.
func NewForTest(client redis.UniversalClient, opts Options) (*Locker, error) {
	return newSingle(client, opts, controls)
}

// NewRedlockForTest is NewRedlock, with the switches set now.
func NewRedlockForTest(clients []redis.UniversalClient, opts Options) (*Locker, error) {
	return newRedlock(clients, opts, controls)
}

// set changes one switch for the Lockers created from now on, and returns
// what puts it back.
func set(change func(*testControls)) (restore func()) {
	old := controls
	change(&controls)
	return func() { controls = old }
}

// SetHealthInterval shortens the subscription's health check for a test.
// Call it before creating the Lockers it should apply to.
func SetHealthInterval(d time.Duration) (restore func()) {
	return set(func(c *testControls) { c.fair.HealthInterval = d })
}

// The rules below each undo one safeguard of the scripts, for the negative
// controls of the tests that show it: Lua placed after common.lua that
// replaces one of its functions.
const (
	// CountingTokens issues tokens from a counter alone, starting at 1
	// when it is missing (kept with the counter's lifetime, as
	// next_token does): a restart without persistence, or the counter's
	// expiry, starts over.
	CountingTokens = `
next_token = function()
  local tok = tonumber(redis.call('GET', fence_key) or '0') + 1
  set_fence(int(tok))
  return tok
end
`
	// UnreservedRuns issues tokens by next_token's rule but records only
	// the token issued, not the last one reserved with it: the replies
	// still promise the reserved tokens to the process's local hand-offs.
	UnreservedRuns = `
next_token = function()
  local n = now_us()
  local last = set_fence(int(n))
  if last and tonumber(last) >= n then
    n = tonumber(last) + 1
    set_fence(int(n))
  end
  return n
end
`
	// FullLeaseGrants grants every waiting process the full lease, also
	// one that may have crashed since it last refreshed its place.
	FullLeaseGrants = `
grant_lease = function(pid, me, ttl, claim)
  return ttl
end
`
	// UncappedClaims grants another process a claim as long as its
	// entry's lease, also when that is longer than the TTL.
	UncappedClaims = `
grant_lease = function(pid, me, ttl, claim)
  if pid == me then return ttl end
  return claim
end
`
	// EntryKeepsPlace treats an entry still in the hash as a place in the
	// queue, expired or not, whether or not the list still holds it.
	EntryKeepsPlace = `
live_entry = function(pid)
  return redis.call('HGET', waiters_key, pid) or nil
end
`
	// UnmarkedQueue never marks the lock's value when processes queue or
	// are granted it: a release then cannot tell that anyone is waiting.
	UnmarkedQueue = `
queued = ''
`
)

// UseScriptRule makes Lockers created from now on run scripts with rule
// (one of the constants above) in place; restore undoes it for later ones.
// A rule that replaces next_token follows token.lua, any other common.lua.
func UseScriptRule(rule string) (restore func()) {
	s := ruleScripts(rule)
	return set(func(c *testControls) { c.scripts = s })
}

func ruleScripts(rule string) *core.Scripts {
	parts := os.DirFS(filepath.Join("internal", "core", "lua", "parts"))
	tokenRule := ""
	if strings.Contains(rule, "next_token =") {
		tokenRule, rule = rule, ""
	}
	a, r, w, err := luagen.Build(parts, tokenRule, rule)
	if err != nil {
		panic(err)
	}
	return core.NewScripts(a, r, w)
}

// IgnoreCloseInAcquire makes Acquire return what it won even when Close
// began meanwhile; restore undoes it. No Locker may be in use when either
// is called.
func IgnoreCloseInAcquire() (restore func()) {
	return set(func(c *testControls) { c.fair.AcquireIgnoresClose = true })
}

// IgnoreRequeueTombstone lets a release queue the process under a ticket
// that the process has withdrawn (the rule for UseScriptRule).
const IgnoreRequeueTombstone = `
requeue_withdrawn = function(key)
  return false
end
`

// RetryScriptCalls lets go-redis send every script call again when its
// reply is lost, as it does for ordinary commands; restore undoes it. No
// Locker may be in use when either is called.
func RetryScriptCalls() (restore func()) {
	return set(func(c *testControls) { c.retryScriptCalls = true })
}

// NoReleaseInference makes a Release whose first call's reply was lost
// report only what its second call saw; restore undoes it. No Locker may
// be in use when either is called.
func NoReleaseInference() (restore func()) {
	return set(func(c *testControls) { c.fair.NoReleaseInference = true })
}

// KeepSubMillisecond makes Lockers created from now on keep durations finer
// than a millisecond, which Redis rounds down; restore undoes it.
func KeepSubMillisecond() (restore func()) {
	return set(func(c *testControls) { c.keepSubMillisecond = true })
}

// UnsubscribeByQueue makes an ending driver remove its lock's channel entry
// whenever it belongs to the same queue, also one a newer driver added;
// restore undoes it.
func UnsubscribeByQueue() (restore func()) {
	return set(func(c *testControls) { c.fair.UnsubscribeByQueue = true })
}

// OnEvent calls fn at the steps testEvent marks: "subscribed" (a driver's
// subscription is in place), "unsubscribe" (an ending driver is about to
// remove it) and "unsubscribed", each with the lock's name. restore undoes
// it. No Locker may be in use when either is called.
func OnEvent(fn func(event, name string)) (restore func()) {
	return set(func(c *testControls) { c.fair.OnEvent = fn })
}

// ScriptSources are the sources of the scripts a Locker created now runs
// through EVALSHA (with the rule UseScriptRule put in place, if any), to
// load them into a server's script cache.
func ScriptSources() []string {
	s := Options{}.scripts(controls)
	extend, err := os.ReadFile(filepath.Join("internal", "core", "lua", "extend.lua"))
	if err != nil {
		panic(err)
	}
	return []string{s.Acquire.Src, s.Release.Src, s.Withdraw.Src, string(extend)}
}

// ScriptCall says which of the lock's script calls the command args (as
// written on the wire: EVALSHA sha numkeys keys... args...) is: "acquire"
// with its mode and ticket, "release" with the owner, "withdraw" or
// "extend" with theirs; "" for any other command.
func ScriptCall(args []string) (script, mode, ticket string) {
	if len(args) < 3 || !strings.EqualFold(args[0], "evalsha") {
		return "", "", ""
	}
	n, err := strconv.Atoi(args[2])
	if err != nil || len(args) < 3+n {
		return "", "", ""
	}
	argv := args[3+n:]
	arg := func(i int) string {
		if i < len(argv) {
			return argv[i]
		}
		return ""
	}
	s := Options{}.scripts(controls)
	switch args[1] {
	case s.Acquire.Hash():
		return "acquire", arg(3), arg(0)
	case s.Release.Hash():
		return "release", "", arg(0)
	case s.Withdraw.Hash():
		return "withdraw", "", arg(1)
	case core.ExtendScript.Hash():
		return "extend", "", arg(0)
	}
	return "", "", ""
}

// RunAcquireScript runs the acquire script once on c for ticket of the
// lock called name, in mode ("0", "1" or "2"), with the default options
// and process id pid, and returns its reply.
func RunAcquireScript(ctx context.Context, c redis.UniversalClient, name, ticket, pid, mode string) ([]int64, error) {
	o, err := Options{}.withDefaults(false)
	if err != nil {
		return nil, err
	}
	k := core.NewKeys(o.Prefix, name)
	return o.scripts(controls).Acquire.Run(ctx, c, k.ForTicket(ticket),
		ticket, o.TTL.Milliseconds(), pid, mode, o.entryLease().Milliseconds(), k.Channel, o.fenceTTLms()).Int64Slice()
}

// Waiting reports how many goroutines of this Locker wait for the lock
// called name.
func (l *Locker) Waiting(name string) int { return l.f.Waiting(name) }

// Listening reports whether this Locker's driver for the lock called name
// listens for grants, so that a release may queue the process in Redis.
func (l *Locker) Listening(name string) bool { return l.f.Listening(name) }

// ID is this Locker's process id, under which it stands in the locks'
// queues in Redis.
func (l *Locker) ID() string { return l.f.ID() }

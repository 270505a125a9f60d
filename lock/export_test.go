package lock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock/internal/queue"
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
	return set(func(c *testControls) { c.handoff.HealthInterval = d })
}

// ScriptRule undoes one safeguard of the scripts, for the negative control
// of the test that shows it: a Lua function that takes the place of the
// function of the same name in every script that has one, or a piece of
// Lua (find) that takes the place of every copy of another (replace).
type ScriptRule struct{ find, replace string }

// The rules below each undo one safeguard of the scripts (UseScriptRule).
var (
	// CountingTokens issues tokens from a counter alone, starting at 1
	// when it is missing (kept with the counter's lifetime, as
	// next_token does): a restart without persistence, or the counter's
	// expiry, starts over.
	CountingTokens = ScriptRule{replace: `local function next_token(fence, fence_ttl)
  local tok = tonumber(redis.call('GET', fence) or '0') + 1
  if fence_ttl == '0' then
    redis.call('SET', fence, tok)
  else
    redis.call('SET', fence, tok, 'PX', fence_ttl)
  end
  return tok
end
`}
	// UnreservedRuns records only the token issued, not the ones reserved
	// with it: the grants still promise them to the process's hand-offs in
	// memory.
	UnreservedRuns = ScriptRule{replace: `local function reserve_tokens(k, fence_ttl, tok, n)
end
`}
	// FullLeaseGrants grants every waiting process the full lease, also
	// one that may have crashed since it last refreshed its place.
	FullLeaseGrants = ScriptRule{replace: `local function grant_lease(pid, me, ttl, claim)
  return ttl
end
`}
	// UncappedClaims grants another process a claim as long as its
	// entry's lease, also when that is longer than the TTL.
	UncappedClaims = ScriptRule{replace: `local function grant_lease(pid, me, ttl, claim)
  if pid == me then return ttl end
  return claim
end
`}
	// EntryKeepsPlace treats an entry still in the hash as a place in the
	// line, expired or not, whether or not the list still holds it.
	EntryKeepsPlace = ScriptRule{replace: `local function live_entry(k, pid)
  return redis.call('HGET', k.waiters, pid) or nil
end
`}
	// QueueIgnored makes a release never look at the line: it deletes its
	// lock and gives it to nobody, whoever waits.
	QueueIgnored = ScriptRule{find: "redis.call('EXISTS', queue)", replace: "0"}
	// IgnoreRequeueTombstone lets a release put the process back in line
	// under a ticket that the process has withdrawn.
	IgnoreRequeueTombstone = ScriptRule{replace: `local function withdrawn()
  return false
end
`}
)

// UseScriptRule makes Lockers created from now on run scripts with rule
// (one of those above) in place; restore undoes it for later ones. It
// panics if no script has what the rule replaces.
func UseScriptRule(rule ScriptRule) (restore func()) {
	edit := func(src string) (string, bool) {
		if rule.find != "" {
			return strings.ReplaceAll(src, rule.find, rule.replace), strings.Contains(src, rule.find)
		}
		name := strings.TrimPrefix(rule.replace[:strings.IndexByte(rule.replace, '(')], "local function ")
		return replaceFunction(src, name, rule.replace)
	}
	found := false
	for _, src := range sources {
		if _, ok := edit(src); ok {
			found = true
		}
	}
	if !found {
		panic(fmt.Sprintf("no script has what %+v replaces", rule))
	}
	return set(func(c *testControls) {
		c.edit = func(_, src string) string {
			out, _ := edit(src)
			return out
		}
	})
}

// sources are the committed scripts, by name.
var sources = func() map[string]string {
	s := Options{}.scripts(testControls{})
	core, q := s.core.Sources(), s.queue.Sources()
	return map[string]string{"acquire": core[0], "wait": q[0], "release": q[1], "withdraw": q[2], "unlock": q[3]}
}()

// replaceFunction replaces every top-level definition of the local
// function name in src, from "local function name(" at the start of a line
// to the first line that is "end", with def; ok reports whether there was
// one.
func replaceFunction(src, name, def string) (out string, ok bool) {
	header := "\nlocal function " + name + "("
	var b strings.Builder
	for {
		begin := strings.Index(src, header)
		if begin < 0 {
			b.WriteString(src)
			return b.String(), ok
		}
		end := strings.Index(src[begin:], "\nend\n")
		if end < 0 {
			panic("no end of " + name)
		}
		b.WriteString(src[:begin+1])
		b.WriteString(def)
		src, ok = src[begin+end+len("\nend\n"):], true
	}
}

// IgnoreCloseInAcquire makes Acquire return what it won even when Close
// began meanwhile; restore undoes it. No Locker may be in use when either
// is called.
func IgnoreCloseInAcquire() (restore func()) {
	return set(func(c *testControls) { c.handoff.AcquireIgnoresClose = true })
}

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
	return set(func(c *testControls) { c.handoff.NoReleaseInference = true })
}

// KeepSubMillisecond makes Lockers created from now on keep durations finer
// than a millisecond, which Redis rounds down; restore undoes it.
func KeepSubMillisecond() (restore func()) {
	return set(func(c *testControls) { c.keepSubMillisecond = true })
}

// UnsubscribeByQueue makes an ending driver stop every listener of its
// lock's channel, also those a newer driver added; restore undoes it.
func UnsubscribeByQueue() (restore func()) {
	return set(func(c *testControls) { c.handoff.StopAllListeners = true })
}

// OnEvent calls fn at the steps the driver marks: "subscribed" (a
// driver's listeners are in place), "unsubscribe" (an ending driver is
// about to stop them) and "unsubscribed", each with the lock's name.
// restore undoes it. No Locker may be in use when either is called.
func OnEvent(fn func(event, name string)) (restore func()) {
	return set(func(c *testControls) { c.handoff.OnEvent = fn })
}

// ScriptSources are the sources of the scripts a Locker created now runs
// through EVALSHA (with the rule UseScriptRule put in place, if any), to
// load them into a server's script cache.
func ScriptSources() []string {
	s := Options{}.scripts(controls)
	return append(s.core.Sources(), s.queue.Sources()...)
}

// ScriptCall says which of the lock's script calls the command args (as
// written on the wire: EVALSHA sha numkeys keys... args...) is, with what
// it carries: "acquire" (core's) with its owner; "wait" with its mode
// ("join" or "refresh") and ticket; "release" (the line's) with its
// requeue ticket and owner; "unlock", "withdraw", "abandon" or "extend"
// with their owner or ticket; "" for any other command.
func ScriptCall(args []string) (script, detail, ticket string) {
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
	line := s.queue.Hashes()
	switch args[1] {
	case line["wait"]:
		return "wait", arg(1), arg(0)
	case line["release"]:
		return "release", arg(1), arg(0)
	case line["withdraw"]:
		return "withdraw", "", arg(0)
	case line["unlock"]:
		return "unlock", "", arg(0)
	}
	for name, sha := range s.core.Hashes() {
		if args[1] == sha {
			return name, "", arg(0)
		}
	}
	return "", "", ""
}

// RunWaitScript runs the line's wait script once on c for ticket of the
// lock called name, in mode ("join" or "refresh"), with the default
// options and process id pid, and returns its reply.
func RunWaitScript(ctx context.Context, c redis.UniversalClient, name, ticket, pid, mode string) ([]int64, error) {
	o, err := Options{}.withDefaults(false)
	if err != nil {
		return nil, err
	}
	k := queue.NewKeys(o.Prefix, name)
	wait := o.scripts(controls).queue.Sources()[0]
	return redis.NewScript(wait).Run(ctx, c, []string{k.Lock, k.Fence, k.Queue, k.Waiters, k.Tombstone(ticket)},
		ticket, mode, pid, o.TTL.Milliseconds(), o.entryLease().Milliseconds(), k.Channel, o.fenceTTL().Milliseconds(), burst-1).Int64Slice()
}

// Waiting reports how many goroutines of this Locker wait for the lock
// called name.
func (l *Locker) Waiting(name string) int { return l.f.Waiting(name) }

// Listening reports whether this Locker's driver for the lock called name
// listens for grants, so that a release may put the process back in line.
func (l *Locker) Listening(name string) bool { return l.f.Listening(name) }

// ID is this Locker's process id, under which it stands in the locks'
// lines in Redis.
func (l *Locker) ID() string { return l.f.ID() }

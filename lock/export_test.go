package lock

import "time"

// SetHealthInterval shortens the subscription's health check for a test.
// Call it before creating the Lockers it should apply to.
func SetHealthInterval(d time.Duration) (restore func()) {
	old := healthInterval
	healthInterval = d
	return func() { healthInterval = old }
}

// The rules below each undo one safeguard of the scripts, for the negative
// controls of the tests that show it: Lua placed after common.lua that
// replaces one of its functions.
const (
	// CountingTokens issues tokens from a counter alone, starting at 1
	// when it is missing: a restart without persistence starts over.
	CountingTokens = `
next_token = function()
  return redis.call('INCR', fence_key)
end
`
	// FullLeaseGrants grants every waiting process the full lease, also
	// one that may have crashed since it last refreshed its place.
	FullLeaseGrants = `
grant_lease = function(pid, me, ttl, claim)
  return ttl
end
`
	// EntryKeepsPlace treats an entry still in the hash as a place in the
	// queue, expired or not, whether or not the list still holds it.
	EntryKeepsPlace = `
live_entry = function(pid)
  return redis.call('HGET', waiters_key, pid) or nil
end
`
)

// UseScriptRule makes Lockers created from now on run scripts with rule
// (one of the constants above) in place; restore undoes it for later ones.
func UseScriptRule(rule string) (restore func()) {
	old := safeScripts
	safeScripts = newScriptSet(rule)
	return func() { safeScripts = old }
}

// IgnoreCloseInAcquire makes Acquire return what it won even when Close
// began meanwhile; restore undoes it. No Locker may be in use when either
// is called.
func IgnoreCloseInAcquire() (restore func()) {
	testAcquireIgnoresClose = true
	return func() { testAcquireIgnoresClose = false }
}

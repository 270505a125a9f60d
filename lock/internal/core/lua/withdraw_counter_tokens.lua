-- Generated from lua/parts/ by gen.go; do not edit. Run go generate
-- ./lock/... after changing a part.
-- The server's clock and the fencing token, in every script that can hand
-- the lock over. It comes before the acquire's fast path (acquire_fast.lua),
-- which runs before common.lua's helpers are even defined (defining them
-- costs more server time than the fast path's commands), so that both
-- paths issue tokens by the same rule. The release's fast path issues no
-- token and comes before this (release_fast.lua).
--   KEYS[2]     fence: the last fencing token issued for this lock (string)
--   ARGV[#ARGV] the fence counter's lifetime in ms ('0': it never expires)
local fence_key, fence_ttl = KEYS[2], ARGV[#ARGV]

-- The server's clock, read at most once per script. Every expiry is judged
-- on this one clock, so clients' clocks never need to agree. time returns
-- TIME's reply (seconds, microseconds), now_us the same instant in µs.
local clock, clock_us
local function time()
  if not clock then clock = redis.call('TIME') end
  return clock
end
local function now_us()
  if not clock_us then
    local t = time()
    clock_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return clock_us
end

-- Integers above 10^14 lose digits through Lua's default number formatting;
-- '%.0f' prints every integer a double holds exactly (up to 2^53).
local function int(n) return string.format('%.0f', n) end

-- set_fence stores tok, a string of digits, as the last token, with the
-- counter's lifetime, and returns the one it replaces (nil if there was
-- none): one command, SET with GET. The lifetime is safe to give it
-- because a token is never smaller than the clock (next_token below): once
-- the counter has expired, the clock alone is larger than every earlier
-- token, unless the server's clock stepped back by nearly the lifetime
-- (Options.FenceTTL).
local function set_fence(tok)
  if fence_ttl == '0' then
    return redis.call('SET', fence_key, tok, 'GET')
  end
  return redis.call('SET', fence_key, tok, 'PX', fence_ttl, 'GET')
end

-- next_token issues the fencing token of a new acquisition: the server's
-- clock in microseconds, or the last token plus one if that is larger.
-- The counter makes tokens strictly increase on one server. The clock makes
-- them keep increasing when the counter comes back older or not at all: a
-- restart without persistence loses it, and a restart from a snapshot taken
-- before the latest acquisitions, or a failover to a replica that had not
-- received them, brings back an older value from which last + 1 would issue
-- again tokens already handed out. The counter leads the clock only for a
-- while: when acquisitions come faster than one per microsecond, when
-- Redlock raised it to a token another node's clock issued
-- (raise_fence.lua), or after a failover from a master whose clock ran
-- ahead of this one; tokens then count up from it until the clock passes
-- it. Either way the first token after such a loss is larger than every
-- earlier one as long as this server's clock reads later than the last
-- token: clocks (one server's across its restart, a master's and its
-- replicas') that differ by less than the restart or failover took, and
-- never step back by more. The counter's expiry (fence_ttl) is one more
-- such loss, after a whole lifetime without an acquisition.
--
-- reserve: how many tokens after the one issued are set aside for the
-- holder's process, which hands them out with the lock to its own waiting
-- goroutines without a round trip (release.lua sets it; fair.Locker.Release).
-- The counter then records the last reserved token, so that whoever takes
-- the lock next, even if that process crashed mid-run, gets a larger one.
local reserve = 0
local function next_token()
  -- The clock's digits, built as a string: string.format and the
  -- arithmetic cost more server time than the rest of the fast path's
  -- token. TIME gives the seconds and the microseconds (0 to 999999).
  local t = time()
  local tok = t[1] .. string.sub('00000' .. t[2], -6)
  local last
  if reserve == 0 then
    last = set_fence(tok)
    -- Strings of digits of one length compare as their numbers (the
    -- seconds have 10 digits from 2001 to 2286), so the common case needs
    -- no conversion: the counter is behind the clock.
    if not last or (#last == #tok and last < tok) then
      return tonumber(tok)
    end
  else
    last = set_fence(int(tonumber(tok) + reserve))
  end
  local n = tonumber(tok)
  if last and tonumber(last) >= n then
    n = tonumber(last) + 1
    set_fence(int(n + reserve))
  end
  return n
end
-- UNSAFE, for demonstrations only (Options.UnsafeCounterTokens): replaces
-- next_token with the last token plus one, and the server's clock only when
-- the counter is missing. A counter that comes back older (a restart from a
-- stale snapshot, a failover to a replica that had not received the latest
-- acquisitions) then issues again tokens already handed out: a resource
-- that accepts equal tokens is then unsafe, and one that refuses them
-- refuses every holder until the counter catches up.
next_token = function()
  local last = redis.call('GET', fence_key)
  local tok
  if last then
    tok = tonumber(last) + 1
  else
    tok = now_us()
  end
  set_fence(int(tok + reserve))
  return tok
end
local function general()
-- Shared by every script that can hand the lock over, after token.lua and
-- the script's fast path: the helpers of its general path. The keys of one
-- lock share a hash tag, so they sit in one Cluster slot and one script may
-- touch them all:
--   KEYS[1] lock     string: the owner's UUID, with the lease as its TTL;
--                    followed by ' q' while processes are queued (below)
--   KEYS[2] fence    string: the last fencing token issued (token.lua)
--   KEYS[3] queue    list:   ids of processes waiting, oldest first
--   KEYS[4] waiters  hash:   process id -> "<expiry ms> <ttl ms> <claim ms> <ticket>"
--   KEYS[5] tombstone string: marks the ticket the script is about as
--                    withdrawn (withdraw.lua): it must never win again (acquire
--                    refuses it, and release does not queue it)
local lock_key, queue_key, waiters_key, tombstone_key = KEYS[1], KEYS[3], KEYS[4], KEYS[5]

local function now_ms() return math.floor(now_us() / 1000) end

-- While processes are queued, the lock's value is its owner's ticket
-- followed by queued, so that a release learns from the GET it does
-- anyway that the queue needs serving, and touches the queue only then
-- (release_fast.lua). Every write of a held lock while the queue exists
-- carries the mark: enqueue marks the holder's value when it puts a
-- process in line, and a grant marks its grantee's. A value is unmarked
-- only where the queue is known to be empty: acquire_fast.lua (EXISTS),
-- and a lock taken or kept when the queue is empty (acquire.lua,
-- release.lua). A mark left after the queue emptied, or expired, costs
-- its release one look at the queue, nothing more.
local queued = ' q'

-- owns reports whether the lock's value v belongs to ticket.
local function owns(v, ticket)
  return v == ticket or v == ticket .. queued
end

-- withdrawn reports whether the ticket whose tombstone is key was withdrawn.
local function withdrawn(key)
  return redis.call('EXISTS', key) == 1
end

-- requeue_withdrawn reports whether the ticket a release is to queue the
-- process under (release.lua) was withdrawn while the release was on its way.
local function requeue_withdrawn(key)
  return withdrawn(key)
end

-- live_entry returns pid's queue entry if it has not expired. An expired
-- entry can linger in the hash (grant_next drops it only when it reaches
-- it, and the hash can outlive the list), but its place in the list is not
-- kept: the list expires with the last live entry's lease. A process whose
-- entry expired is no longer in line, whatever the hash still says.
local function live_entry(pid)
  local entry = redis.call('HGET', waiters_key, pid)
  if entry and tonumber(string.match(entry, '^%d+')) > now_ms() then
    return entry
  end
  return nil
end

-- enqueue puts process pid at the back of the queue, or refreshes its entry
-- where it already stands. The entry expires lease ms from now unless the
-- process refreshes it, so a crashed process drops out of the queue; a grant
-- to another process starts with a claim lease as long as the entry's.
-- standing: the caller has just seen pid's live entry (no need to read it
-- again). cur: the lock's value now (nil when it is free), which a process
-- new in line marks queued.
local function enqueue(pid, ticket, ttl, lease, standing, cur)
  if not standing and not live_entry(pid) then
    -- Not in line: never queued, or its entry expired. An expired entry
    -- may have left its id in the list; one place per process.
    redis.call('LREM', queue_key, 0, pid)
    redis.call('RPUSH', queue_key, pid)
    if cur and string.sub(cur, -#queued) ~= queued then
      redis.call('SET', lock_key, cur .. queued, 'KEEPTTL')
    end
  end
  redis.call('HSET', waiters_key, pid, int(now_ms() + lease) .. ' ' .. ttl .. ' ' .. int(lease) .. ' ' .. ticket)
  -- The queue keys outlive every entry, and are only ever extended: a
  -- process with a shorter lease must not cut another's short.
  for _, k in ipairs({queue_key, waiters_key}) do
    if redis.call('PTTL', k) < lease then
      redis.call('PEXPIRE', k, lease)
    end
  end
end

-- grant_lease is the lease a grant starts with. The caller's own process
-- (me) is alive, running this script, and takes the grant from the reply:
-- it gets the full lease. Any other process may have crashed since it last
-- refreshed its entry, which outlives it by up to the entry's lease. Its
-- grant gets only a claim lease, as long as that entry lease (or the full
-- lease, if that is shorter), and the grantee extends it to the full lease
-- when it takes the grant. A grant to a crashed process then blocks the
-- lock for a claim lease, not a TTL.
local function grant_lease(pid, me, ttl, claim)
  if pid == me then return ttl end
  return math.min(tonumber(claim), tonumber(ttl))
end

-- grant_next hands the free lock to the oldest live waiting process: the
-- lock's value becomes that process's ticket (a fresh UUID), with a new
-- fencing token, in this same script. No other client can take the lock in
-- between, so the hand-off is in queue order and costs the next holder no
-- round trip. Other processes learn of their grant from the message on the
-- lock's channel; the caller (me) learns from the reply. The grantee's
-- value is marked queued: others may be in line behind it. The message
-- names the token and the last one reserved with it (token.lua, reserve).
-- Returns the process id, ticket, token and lease in ms, or nil when
-- nobody live is waiting.
local function grant_next(channel, me)
  while true do
    local pid = redis.call('LPOP', queue_key)
    if not pid then return nil end
    local entry = redis.call('HGET', waiters_key, pid)
    if entry then
      redis.call('HDEL', waiters_key, pid)
      local expiry, ttl, claim, ticket = string.match(entry, '^(%d+) (%d+) (%d+) (.+)$')
      if expiry and tonumber(expiry) > now_ms() then
        local px = grant_lease(pid, me, ttl, claim)
        redis.call('SET', lock_key, ticket .. queued, 'PX', px)
        local tok = next_token()
        if pid ~= me then
          redis.call('PUBLISH', channel, pid .. ' ' .. ticket .. ' ' .. int(tok) .. ' ' .. int(tok + reserve))
        end
        return pid, ticket, tok, tonumber(px)
      end
    end
  end
end
-- withdraw: the ticket ARGV[2] will never be used. Called when the last
-- local waiter leaves, and after an acquire whose reply was lost (fail
-- closed: the acquire may have run). It leaves a tombstone so that a late
-- request carrying the ticket cannot take the lock, leaves the queue if the
-- process stands there under this ticket, and passes the lock on if it was
-- already granted to the ticket. The order in which this and a late acquire
-- arrive does not matter.
--   ARGV[1] process id   ARGV[2] ticket   ARGV[3] channel for grants
--   ARGV[4] tombstone lifetime in ms (the lease: a request later than that
--           would take a lock that expires unrenewed anyway)
--   ARGV[5] the fence counter's lifetime in ms ('0': none; token.lua)
-- Returns 1 if a lock held by the ticket was passed on.
local pid, ticket, channel = ARGV[1], ARGV[2], ARGV[3]
redis.call('SET', tombstone_key, '1', 'PX', ARGV[4])
local entry = redis.call('HGET', waiters_key, pid)
if entry and string.sub(entry, -#ticket) == ticket then
  redis.call('HDEL', waiters_key, pid)
  redis.call('LREM', queue_key, 0, pid)
end
if owns(redis.call('GET', lock_key), ticket) then
  redis.call('DEL', lock_key)
  -- Publish even a grant to our own process: its driver is not in this call.
  grant_next(channel, '')
  return 1
end
return 0

end
return general()

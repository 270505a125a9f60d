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

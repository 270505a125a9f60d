-- Shared by every script that can hand the lock over. The keys of one lock
-- share a hash tag, so they sit in one Cluster slot and one script may touch
-- them all:
--   KEYS[1] lock     string: the owner's UUID, with the lease as its TTL
--   KEYS[2] fence    string: the last fencing token issued for this lock
--   KEYS[3] queue    list:   ids of processes waiting, oldest first
--   KEYS[4] waiters  hash:   process id -> "<expiry ms> <ttl ms> <claim ms> <ticket>",
--                    and field 'turn' -> "<process id> <grants in a row>"
--   KEYS[5] void     string: tombstone of the ticket the script is about:
--                    one given up (withdraw) or released (release) must
--                    never win again (acquire refuses it)
local lock_key, fence_key, queue_key, waiters_key, void_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

-- The server's clock, read at most once per script. Every expiry is judged
-- on this one clock, so clients' clocks never need to agree.
local clock_us
local function now_us()
  if not clock_us then
    local t = redis.call('TIME')
    clock_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return clock_us
end
local function now_ms() return math.floor(now_us() / 1000) end

-- Integers above 10^14 lose digits through Lua's default number formatting;
-- '%.0f' prints every integer a double holds exactly (up to 2^53).
local function int(n) return string.format('%.0f', n) end

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
-- never step back by more.
local function next_token()
  local tok = now_us()
  local last = redis.call('GET', fence_key)
  if last then
    tok = math.max(tok, tonumber(last) + 1)
  end
  redis.call('SET', fence_key, int(tok))
  return tok
end

-- voided reports whether the ticket whose tombstone is key was given up.
local function voided(key)
  return redis.call('EXISTS', key) == 1
end

-- requeue_voided reports whether the ticket a release is to queue the
-- process under (release.lua) was given up while the release was on its way.
local function requeue_voided(key)
  return voided(key)
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
local function enqueue(pid, ticket, ttl, lease)
  if not live_entry(pid) then
    -- Not in line: never queued, or its entry expired. An expired entry
    -- may have left its id in the list; one place per process.
    redis.call('LREM', queue_key, 0, pid)
    redis.call('RPUSH', queue_key, pid)
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
-- lock's channel; the caller (me) learns from the reply. Returns the
-- process id, ticket, token and lease in ms, or nil when nobody live is
-- waiting.
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
        redis.call('SET', lock_key, ticket, 'PX', px)
        -- Whose turn it is (release.lua's burst). If that was the last
        -- entry, the hash is gone; the record it recreates expires with
        -- the lease the grantee will hold.
        redis.call('HSET', waiters_key, 'turn', pid .. ' 1')
        if redis.call('PTTL', waiters_key) < 0 then
          redis.call('PEXPIRE', waiters_key, ttl)
        end
        local tok = next_token()
        if pid ~= me then
          redis.call('PUBLISH', channel, pid .. ' ' .. ticket .. ' ' .. int(tok))
        end
        return pid, ticket, tok, tonumber(px)
      end
    end
  end
end

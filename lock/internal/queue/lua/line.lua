-- line.lua: the lock's queue of waiting processes, as the queue's scripts
-- keep it. Every script of package queue carries a copy of this file,
-- between the lines that name it (go generate ./lock/... keeps the copies
-- in step), after token.lua, whose now and next_token it uses. Its
-- functions take the lock's keys as a table k: k.lock, k.fence, k.queue
-- and k.waiters (see each script's top).
--
-- The queue is a list of process ids, oldest first, and a hash of each
-- process's entry: "<expiry ms> <lease ms> <claim ms> <ticket>". A ticket
-- is a fresh UUID, the owner that the process's next acquisition will
-- have; the entry expires unless the process refreshes it, so that a
-- process that crashed while waiting drops out of the queue.

local function int(n) return string.format('%.0f', n) end

local function now_ms()
  local t = now()
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- live_entry is pid's entry if it has not expired. An expired entry can
-- linger in the hash (grant_next drops it only when it reaches it, and an
-- eviction can take the list and leave the hash), but its place is not
-- kept: a process whose entry expired is no longer in line, whatever the
-- hash still says.
local function live_entry(k, pid)
  local entry = redis.call('HGET', k.waiters, pid)
  if entry and tonumber(string.match(entry, '^%d+')) > now_ms() then
    return entry
  end
  return nil
end

-- enqueue puts pid at the back of the queue under ticket, or, if it
-- stands there already (standing: its caller has just seen its live
-- entry), refreshes its entry. The entry expires lease ms from now, and a
-- grant to the process starts with a claim of as long (grant_lease).
local function enqueue(k, pid, ticket, ttl, lease, standing)
  if not standing and not live_entry(k, pid) then
    -- Not in line: never queued, or its entry expired, which may have
    -- left its id in the list. One place per process.
    redis.call('LREM', k.queue, 0, pid)
    redis.call('RPUSH', k.queue, pid)
  end
  redis.call('HSET', k.waiters, pid, int(now_ms() + lease) .. ' ' .. ttl .. ' ' .. lease .. ' ' .. ticket)
  -- The queue's keys outlive every entry, and are only ever extended: a
  -- process with a shorter lease must not cut another's short.
  for _, key in ipairs({k.queue, k.waiters}) do
    if redis.call('PTTL', key) < tonumber(lease) then
      redis.call('PEXPIRE', key, lease)
    end
  end
end

-- grant_lease is the lease a grant to pid starts with. The process that
-- runs the script (me) is alive, and learns of the grant from the reply:
-- it gets the full ttl. Any other may have crashed since it last refreshed
-- its entry, which outlives it by up to the entry's lease: its grant is a
-- claim that long (the ttl, if shorter), which the process extends to the
-- ttl as it takes the grant. A grant to a crashed process then blocks the
-- lock for a claim, not a whole lease.
local function grant_lease(pid, me, ttl, claim)
  if pid == me then return ttl end
  return math.min(tonumber(claim), tonumber(ttl))
end

-- reserve_tokens sets n tokens after tok aside for the process the lock
-- is given to, which hands them out with the lock to its own waiting
-- goroutines without a round trip (package handoff): the counter records
-- the last of them, so that whoever takes the lock next, even after that
-- process crashed mid-run, gets a larger token.
local function reserve_tokens(k, fence_ttl, tok, n)
  if n <= 0 then return end
  if fence_ttl == '0' then
    redis.call('SET', k.fence, int(tok + n))
  else
    redis.call('SET', k.fence, int(tok + n), 'PX', fence_ttl)
  end
end

-- grant_next gives the free lock to the oldest live waiting process: the
-- lock's value becomes that process's ticket, with a new fencing token
-- and reserve more set aside, in this same script. No other client can
-- take the lock in between, so the lock goes in queue order, and the next
-- holder needs no round trip of its own. Another process learns of its
-- grant from the message on the lock's channel ("<pid> <ticket> <token>
-- <last reserved>"); the process that runs the script (me), from the
-- reply. Returns the process id, ticket, token and lease in ms, or nil
-- when nobody live waits.
local function grant_next(k, channel, me, fence_ttl, reserve)
  while true do
    local pid = redis.call('LPOP', k.queue)
    if not pid then return nil end
    local entry = redis.call('HGET', k.waiters, pid)
    if entry then
      redis.call('HDEL', k.waiters, pid)
      local expiry, ttl, claim, ticket = string.match(entry, '^(%d+) (%d+) (%d+) (.+)$')
      if expiry and tonumber(expiry) > now_ms() then
        local px = grant_lease(pid, me, ttl, claim)
        redis.call('SET', k.lock, ticket, 'PX', px)
        local tok = next_token(k.fence, fence_ttl)
        reserve_tokens(k, fence_ttl, tok, reserve)
        if pid ~= me then
          redis.call('PUBLISH', channel, pid .. ' ' .. ticket .. ' ' .. int(tok) .. ' ' .. int(tok + reserve))
        end
        return pid, ticket, tok, tonumber(px)
      end
    end
  end
end

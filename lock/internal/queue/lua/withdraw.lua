-- withdraw: the process gives ticket up for good: its last waiting
-- goroutine left, it closes, or a call carrying the ticket got no reply.
-- The tombstone makes a late request carrying the ticket fail (wait.lua,
-- release.lua, core's acquire.lua), whichever of the two reaches Redis
-- first; the process leaves the line if it stands there under this
-- ticket; and a lock the ticket holds goes to the next in line.
--
--   KEYS[1] lock      the owner's UUID, with the lease as its TTL
--   KEYS[2] fence     the last fencing token (token.lua)
--   KEYS[3] queue     the ids of the waiting processes, oldest first (line.lua)
--   KEYS[4] waiters   each waiting process's entry (line.lua)
--   KEYS[5] tombstone the ticket's
--   ARGV[1] ticket
--   ARGV[2] pid       the process's id
--   ARGV[3] ttl       the tombstone's lifetime in ms: the lease (a request
--                     later than that takes a lock whose lease nobody
--                     renews, which ends on its own)
--   ARGV[4] channel   where grants are published
--   ARGV[5] fence_ttl the fence counter's lifetime in ms ('0': for ever)
--   ARGV[6] reserve   tokens a grant sets aside (line.lua, reserve_tokens)
--
-- Returns 1 if a lock the ticket held was passed on. It is safe to
-- repeat.
local k = {lock = KEYS[1], fence = KEYS[2], queue = KEYS[3], waiters = KEYS[4]}
local tombstone = KEYS[5]
local ticket, pid, ttl, channel, fence_ttl, reserve =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])

-- >>> token.lua (a copy; edit lock/internal/core/lua/token.lua, then go generate ./lock/...)
-- token.lua: the server's clock and the fencing token. Every script that
-- gives the lock to someone carries a copy of this file, between the
-- lines that name it (go generate ./lock/... keeps the copies in step).
--
-- now is the server's clock (TIME: seconds, microseconds), read once per
-- script. Every lease and every token is judged on this one clock, so the
-- clients' clocks never need to agree.
local clock
local function now()
  if not clock then clock = redis.call('TIME') end
  return clock
end

-- next_token issues the fencing token of a new acquisition and records it
-- as the last one in the counter fence, which lives fence_ttl ms ('0': for
-- ever): the server's clock in microseconds, or the last token plus one if
-- that is larger. The resource the lock protects refuses a holder whose
-- token is older than one it has seen, and so stops a holder that stalled
-- past its lease (the fencing token of docs/lock.md's References).
--
-- Why both. The counter makes tokens strictly increase on one server. The
-- clock makes them keep increasing when Redis loses the counter's latest
-- value: a restart without persistence loses it, and a restart from a
-- snapshot taken before the latest acquisitions, or a failover to a
-- replica that had not received them, brings back an older value, from
-- which the counter alone would issue again tokens already handed out.
-- The first token after such a loss is larger than every earlier one as
-- long as this server's clock reads later than the last token: clocks (one
-- server's across its restart, a master's and its replicas') that differ
-- by less than the restart or failover took. The same rule lets the
-- counter expire a whole fence_ttl after the last acquisition. The counter
-- leads the clock only for a while: when acquisitions come faster than one
-- per microsecond, or after Redlock raised it to another node's token.
local function next_token(fence, fence_ttl)
  -- The clock's digits, as a string: Lua's arithmetic and string.format
  -- cost more server time than the rest of the script. Strings of digits
  -- of one length compare as their numbers (the seconds have 10 digits
  -- from 2001 to 2286), so the common case, the counter behind the clock,
  -- needs no conversion.
  local t = now()
  local tok = t[1] .. string.sub('00000' .. t[2], -6)
  local last
  if fence_ttl == '0' then
    last = redis.call('SET', fence, tok, 'GET')
  else
    last = redis.call('SET', fence, tok, 'PX', fence_ttl, 'GET')
  end
  if not last or (#last == #tok and last < tok) then
    return tonumber(tok)
  end
  local n = tonumber(tok)
  if tonumber(last) >= n then
    -- '%.0f' prints every integer a double holds exactly (up to 2^53);
    -- Lua's default format loses digits above 10^14.
    n = tonumber(last) + 1
    if fence_ttl == '0' then
      redis.call('SET', fence, string.format('%.0f', n))
    else
      redis.call('SET', fence, string.format('%.0f', n), 'PX', fence_ttl)
    end
  end
  return n
end
-- <<< token.lua

-- >>> line.lua (a copy; edit lock/internal/queue/lua/line.lua, then go generate ./lock/...)
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
-- <<< line.lua

redis.call('SET', tombstone, '1', 'PX', ttl)
local entry = redis.call('HGET', k.waiters, pid)
if entry and string.sub(entry, -#ticket) == ticket then
  redis.call('HDEL', k.waiters, pid)
  redis.call('LREM', k.queue, 0, pid)
end
if redis.call('GET', k.lock) == ticket then
  redis.call('DEL', k.lock)
  -- Published even to this process: the goroutine that waits for it is
  -- not in this call.
  grant_next(k, channel, '', fence_ttl, reserve)
  return 1
end
return 0

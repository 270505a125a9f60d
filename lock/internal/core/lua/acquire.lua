-- acquire: take the lock for a new owner if it is free, and give the
-- acquisition its fencing token. The first two steps are the whole
-- pattern; the token (token.lua, copied in) comes only to an owner that
-- took the lock.
--
--   KEYS[1] lock       the owner's UUID, with the lease as its TTL
--   KEYS[2] fence      the last fencing token of the lock (token.lua)
--   KEYS[3] tombstone  exists if the owner was abandoned (abandon.lua)
--   ARGV[1] owner      a fresh UUID: only this acquisition can release or
--                      extend the lock
--   ARGV[2] the lease in ms
--   ARGV[3] the fence counter's lifetime in ms ('0': it never expires)
--
-- Returns the token, a positive number, when the owner took the lock;
-- -1 - pttl when another owner holds it (pttl: the rest of that lease, in
-- ms); nil when the owner was abandoned before this request arrived.
-- (Numbers, not a table: the reply is on every acquisition's path, and a
-- table costs Redis more to send.)
local lock, fence, tombstone = KEYS[1], KEYS[2], KEYS[3]
local owner, ttl, fence_ttl = ARGV[1], ARGV[2], ARGV[3]


-- Mutual exclusion and no deadlock in one atomic command: the key is set
-- only if nobody holds it (NX), and with the lease (PX), so a holder that
-- dies frees it after ttl. SETNX then EXPIRE leaves a lock that never
-- expires when the client dies in between (antipattern.SetNXThenExpire;
-- post 1 and post 4 in docs/lock.md's References, "wrong lock one").
if not redis.call('SET', lock, owner, 'NX', 'PX', ttl) then
  return -1 - math.max(redis.call('PTTL', lock), 0)
end
-- An acquire whose reply never came may still arrive, late, after its
-- client gave the owner up and moved on: it must not take the lock for a
-- whole lease, for nobody. No other client can act between the SET and
-- the DEL: the script is atomic.
if redis.call('EXISTS', tombstone) == 1 then
  redis.call('DEL', lock)
  return false
end
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

return next_token(fence, fence_ttl)

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

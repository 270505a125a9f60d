-- token.lua, UNSAFE rule (Options.UnsafeCounterTokens), for demonstrations
-- and fault tests only: the token is the last one plus one, and the
-- server's clock only when the counter is missing. A counter that comes
-- back older (a restart from a stale snapshot, a failover to a replica
-- that had not received the latest acquisitions) then issues again tokens
-- already handed out: a resource that accepts equal tokens lets two
-- holders write, and one that refuses them refuses every holder until the
-- counter catches up. It replaces the copy of token.lua in every script.
local clock
local function now()
  if not clock then clock = redis.call('TIME') end
  return clock
end

local function next_token(fence, fence_ttl)
  local last = redis.call('GET', fence)
  local tok
  if last then
    tok = tonumber(last) + 1
  else
    tok = tonumber(now()[1]) * 1000000 + tonumber(now()[2])
  end
  if fence_ttl == '0' then
    redis.call('SET', fence, string.format('%.0f', tok))
  else
    redis.call('SET', fence, string.format('%.0f', tok), 'PX', fence_ttl)
  end
  return tok
end

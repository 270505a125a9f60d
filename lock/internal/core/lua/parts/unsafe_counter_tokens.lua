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

-- raise_fence (Redlock): make this node's fence counter at least ARGV[1],
-- the largest token the holder's quorum issued. Any later quorum shares a
-- node with this one, so it will issue a larger token.
-- ARGV[2] is the counter's lifetime in ms ('0': none), as next_token sets it.
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur < tonumber(ARGV[1]) then
  if ARGV[2] == '0' then
    redis.call('SET', KEYS[1], ARGV[1])
  else
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  end
end
return 1

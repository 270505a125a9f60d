-- acquire, fast path (the arguments are acquire.lua's). An uncontended
-- attempt (mode '0') with nobody queued, so that nobody is owed the lock
-- first, and a ticket not withdrawn: SET NX PX takes the lock if it is free,
-- then the token. EXISTS checks the queue and the tombstone in one command.
-- If the lock is held by another owner, say for how long. Anything else
-- (a queue, a tombstone, another mode, the lock held by this very ticket)
-- goes on to the general path, acquire.lua.
if ARGV[4] == '0' and redis.call('EXISTS', KEYS[3], KEYS[5]) == 0 then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {1, next_token(), tonumber(ARGV[2])}
  end
  local cur = redis.call('GET', KEYS[1])
  if cur ~= ARGV[1] and cur ~= ARGV[1] .. ' q' then
    return {0, 0, redis.call('PTTL', KEYS[1])}
  end
end

-- acquire, fast path (the arguments are acquire.lua's). An uncontended
-- attempt (mode '0'): SET NX PX takes the lock if it is free; then EXISTS
-- checks the queue and the ticket's tombstone in one command. With neither,
-- nobody is owed the lock first and the ticket was not withdrawn: the
-- token, and done. With either, the SET is undone (no other client can
-- act on it in between: the script is atomic, though the SET and DEL
-- reach replicas and keyspace notifications) and the general path,
-- acquire.lua, decides. If the lock is held by another owner, say for how
-- long: whoever is queued, a held lock is not ours to take, and a waiting
-- caller queues next. Anything else (another mode, the lock held by this
-- very ticket) goes on to the general path.
if ARGV[4] == '0' then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    if redis.call('EXISTS', KEYS[3], KEYS[5]) == 0 then
      return {1, next_token(), tonumber(ARGV[2])}
    end
    redis.call('DEL', KEYS[1])
  else
    local cur = redis.call('GET', KEYS[1])
    if cur ~= ARGV[1] and cur ~= ARGV[1] .. ' q' then
      return {0, 0, redis.call('PTTL', KEYS[1])}
    end
  end
end

-- withdraw: this process has no waiter left for the lock. Leave the queue,
-- and if a release already granted the lock to our ticket, pass it on.
--   ARGV[1] process id   ARGV[2] ticket   ARGV[3] channel for grants
-- Returns 1 if a grant to the ticket was passed on.
local pid, ticket, channel = ARGV[1], ARGV[2], ARGV[3]
redis.call('HDEL', waiters_key, pid)
redis.call('LREM', queue_key, 0, pid)
if redis.call('GET', lock_key) == ticket then
  redis.call('DEL', lock_key)
  grant_next(channel, pid)
  return 1
end
return 0

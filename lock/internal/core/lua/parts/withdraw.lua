-- withdraw: the ticket ARGV[2] will never be used. Called when the last
-- local waiter leaves, and after an acquire whose reply was lost (fail
-- closed: the acquire may have run). It leaves a tombstone so that a late
-- request carrying the ticket cannot take the lock, leaves the queue if the
-- process stands there under this ticket, and passes the lock on if it was
-- already granted to the ticket. The order in which this and a late acquire
-- arrive does not matter.
--   ARGV[1] process id   ARGV[2] ticket   ARGV[3] channel for grants
--   ARGV[4] tombstone lifetime in ms (the lease: a request later than that
--           would take a lock that expires unrenewed anyway)
--   ARGV[5] the fence counter's lifetime in ms ('0': none; token.lua)
-- Returns 1 if a lock held by the ticket was passed on.
local pid, ticket, channel = ARGV[1], ARGV[2], ARGV[3]
redis.call('SET', tombstone_key, '1', 'PX', ARGV[4])
local entry = redis.call('HGET', waiters_key, pid)
if entry and string.sub(entry, -#ticket) == ticket then
  redis.call('HDEL', waiters_key, pid)
  redis.call('LREM', queue_key, 0, pid)
end
if owns(redis.call('GET', lock_key), ticket) then
  redis.call('DEL', lock_key)
  -- Publish even a grant to our own process: its driver is not in this call.
  grant_next(channel, '')
  return 1
end
return 0

-- release (Redlock), on one node: give owner up there for good, and wake
-- the processes that wait for the lock. Used both to release and to undo
-- a failed attempt, on every node, also on those that did not answer:
-- their reply may have been lost, or the request may still arrive, and
-- the tombstone then makes it fail (core's acquire.lua).
--
--   KEYS[1] lock   KEYS[2] the owner's tombstone
--   ARGV[1] owner  ARGV[2] the channel the waiting processes listen on
--   ARGV[3] the tombstone's lifetime in ms: the lease
--
-- Returns 1 if this call, or an earlier run of it, deleted the lock.
local again = redis.call('EXISTS', KEYS[2]) == 1
redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  -- A message, not a grant: no queue spans the nodes, so the waiting
  -- processes try again.
  redis.call('PUBLISH', ARGV[2], 'wake')
  return 1
end
if again then return 1 end
return 0

-- redlock_withdraw (Redlock): on one node, withdraw ticket ARGV[1]: leave
-- its tombstone, and delete the lock if that ticket holds it, then wake the
-- waiters. Used both to release and to withdraw a failed attempt on every
-- node, including those that did not answer (their reply may have been
-- lost, or the request may still arrive: the tombstone makes it fail).
--   KEYS[1] lock   KEYS[2] the ticket's tombstone
--   ARGV[1] ticket   ARGV[2] channel   ARGV[3] tombstone lifetime in ms
-- Returns 1 if this call or an earlier run of it deleted the lock.
local again = redis.call('EXISTS', KEYS[2]) == 1
redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
-- The value may carry the mark ' q' (common.lua) like any lock's, though
-- no Redlock acquisition queues.
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] or cur == ARGV[1] .. ' q' then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'wake')
  return 1
end
if again then return 1 end
return 0

-- release: delete the lock if ARGV[1] still owns it (compare-and-delete in
-- one script, so a lease that expired and was taken by someone else is never
-- deleted), then hand the free lock to the next waiting process.
--   ARGV[1] owner      ARGV[2] process id
--   ARGV[3] ticket to queue this process with ('' = do not queue): the
--           releaser's process has more local waiters
--   ARGV[4] lease in ms for that ticket   ARGV[5] queue entry lease in ms
--   ARGV[6] channel for grants
-- Returns {released, 1, token, ttl, ticket} when the lock went to a ticket of
-- the caller's own process, {released, 0, 0, 0, ''} otherwise.
local owner, pid, requeue, ttl, lease, channel =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6]

local released = 0
if redis.call('GET', lock_key) == owner then
  redis.call('DEL', lock_key)
  released = 1
end
if requeue ~= '' then
  enqueue(pid, requeue, ttl, lease)
end
if redis.call('EXISTS', lock_key) == 0 then
  local gpid, gticket, tok, gttl = grant_next(channel, pid)
  if gpid == pid then
    return {released, 1, tok, gttl, gticket}
  end
end
return {released, 0, 0, 0, ''}

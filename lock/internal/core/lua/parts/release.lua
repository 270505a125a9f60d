-- release: delete the lock if ARGV[1] still owns it (compare-and-delete in
-- one script, so a lease that expired and was taken by someone else is never
-- deleted), then hand the free lock to the next waiting process. This is
-- the general path, after the fast path (release_fast.lua): cur and fetched
-- are what that found.
--   ARGV[1] owner      ARGV[2] process id
--   ARGV[3] ticket to queue this process with ('' = do not queue): the
--           releaser's process has more local waiters
--   ARGV[4] lease in ms for that ticket   ARGV[5] queue entry lease in ms
--   ARGV[6] channel for grants
--   ARGV[7] burst: how many holds in a row a process with more local
--           waiters may make while others are queued. Each token this
--           script issues comes with burst - 1 more reserved (token.lua),
--           which the process hands out with the lock to its own waiters
--           without asking Redis (fair.Locker.Release); then it queues behind
--           the others.
--   ARGV[8] the fence counter's lifetime in ms ('0': none; token.lua)
--   KEYS[5] the tombstone of the ticket to queue (ARGV[3]): the process may
--           have given it up while this call was on its way (Close, or its
--           waiters left), and its withdraw may have arrived first. Such a
--           ticket must not be queued nor granted: nobody would take it.
-- A release leaves no trace of the owner: the Locker never sends one twice
-- (a lost reply is followed by a release without a ticket to queue, which
-- is safe to repeat), and tells from the Lock's deadline whether a lock
-- that second call found gone was released by the first (fair.Locker.Release).
-- Returns {released, 1, token, ttl, ticket, last} when the lock went to a
-- ticket of the caller's own process (last: the last token reserved with
-- it), {released, 0, 0, 0, ''} otherwise.
local owner, pid, requeue, ttl, lease, channel =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6]
reserve = tonumber(ARGV[7]) - 1

if not fetched then
  -- The fast path did nothing: there is a ticket to queue.
  if requeue_withdrawn(tombstone_key) then
    requeue = ''
  end
  cur = redis.call('GET', lock_key)
end
local released = 0
if owns(cur, owner) then
  redis.call('DEL', lock_key)
  released = 1
end
if requeue ~= '' and (released == 1 or not cur) and redis.call('LLEN', queue_key) == 0 then
  -- The releaser's process has more goroutines waiting, and no other
  -- process is: it keeps the lock, for the next of them. (With others
  -- queued, its run is over: the process handed out its reserved tokens
  -- already, or could not, and queues behind them.)
  redis.call('SET', lock_key, requeue, 'PX', ttl)
  local tok = next_token()
  return {released, 1, tok, tonumber(ttl), requeue, tok + reserve}
end
if requeue ~= '' then
  -- cur still holds the lock, unless this release deleted it.
  local holder = cur
  if released == 1 then holder = nil end
  enqueue(pid, requeue, ttl, lease, false, holder)
end
if released == 1 or not cur then
  local gpid, gticket, tok, gttl = grant_next(channel, pid)
  if gpid == pid then
    return {released, 1, tok, gttl, gticket, tok + reserve}
  end
end
return {released, 0, 0, 0, ''}

-- release: delete the lock if ARGV[1] still owns it (compare-and-delete in
-- one script, so a lease that expired and was taken by someone else is never
-- deleted), then hand the free lock to the next waiting process.
--   ARGV[1] owner      ARGV[2] process id
--   ARGV[3] ticket to queue this process with ('' = do not queue): the
--           releaser's process has more local waiters
--   ARGV[4] lease in ms for that ticket   ARGV[5] queue entry lease in ms
--   ARGV[6] channel for grants
--   ARGV[7] burst: how many hand-offs in a row a process with more local
--           waiters may keep, before the next process in line gets it
--   KEYS[5] the owner's tombstone, written when it releases. A release
--           whose reply was lost is asked again without a ticket to queue;
--           that second call finds the tombstone and reports that the
--           first released.
--   KEYS[6] the tombstone of the ticket to queue (ARGV[3]): the process may
--           have given it up while this call was on its way (Close, or its
--           waiters left), and its withdraw may have arrived first. Such a
--           ticket must not be queued nor granted: nobody would take it.
-- Returns {released, 1, token, ttl, ticket} when the lock went to a ticket of
-- the caller's own process, {released, 0, 0, 0, ''} otherwise.
local owner, pid, requeue, ttl, lease, channel, burst =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])

if requeue ~= '' and requeue_voided(KEYS[6]) then
  requeue = ''
end
local cur = redis.call('GET', lock_key)
if cur ~= owner and redis.call('EXISTS', void_key) == 1 then
  if requeue ~= '' and cur == requeue then
    return {1, 1, tonumber(redis.call('GET', fence_key)), redis.call('PTTL', lock_key), requeue}
  end
  return {1, 0, 0, 0, ''}
end
local released = 0
if cur == owner then
  redis.call('DEL', lock_key)
  redis.call('SET', void_key, '1', 'PX', ttl)
  released = 1
end
if requeue ~= '' and (released == 1 or not cur) then
  -- The releaser's process has more goroutines waiting. Handing the lock
  -- to one of them needs no message and no wake-up in another process, so
  -- it may keep the lock for a few hand-offs in a row (at most burst),
  -- and then must queue behind the processes already waiting. Waiting
  -- stays bounded; the lock spends less time changing hands.
  local turn = redis.call('HGET', waiters_key, 'turn')
  local tpid, tcount = nil, 0
  if turn then
    tpid, tcount = string.match(turn, '^(%S+) (%d+)$')
    tcount = tonumber(tcount)
  end
  local others = redis.call('LLEN', queue_key) > 0
  if not others or (tpid == pid and tcount < burst) then
    redis.call('SET', lock_key, requeue, 'PX', ttl)
    if others then
      -- The queue's entries keep the hash (and its expiry) alive.
      redis.call('HSET', waiters_key, 'turn', pid .. ' ' .. (tcount + 1))
    end
    return {released, 1, next_token(), tonumber(ttl), requeue}
  end
end
if requeue ~= '' then
  enqueue(pid, requeue, ttl, lease)
end
if released == 1 or not cur then
  local gpid, gticket, tok, gttl = grant_next(channel, pid)
  if gpid == pid then
    return {released, 1, tok, gttl, gticket}
  end
end
return {released, 0, 0, 0, ''}

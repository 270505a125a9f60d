-- acquire: take the lock for ARGV[1], or queue this process so that a
-- release hands the lock to it. This is the general path, which runs when
-- the fast path (acquire_fast.lua) does not decide.
--   ARGV[1] ticket (the owner UUID of this acquisition)
--   ARGV[2] lease in ms          ARGV[3] process id
--   ARGV[4] mode: '0' take it if free, do not queue; '1' queue under this
--           new ticket; '2' refresh our place in the queue
--   ARGV[5] queue entry lease in ms   ARGV[6] channel for grants
--   ARGV[7] the fence counter's lifetime in ms ('0': none; token.lua)
-- Returns {1, token, lease} when the caller holds the lock, {0, 0, pttl} when
-- another owner does, {-1, 0, 0} when mode '2' finds our place gone, and
-- {-2, 0, 0} when the ticket was withdrawn.
local ticket, ttl, pid, mode, lease, channel =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6]

local cur = redis.call('GET', lock_key)
if owns(cur, ticket) then
  -- Granted to this ticket by a release whose message we have not seen (or
  -- lost), with a claim lease: take it, with the full lease. Nobody can
  -- have acquired since, so the fence holds our token, or the last one
  -- reserved with it (token.lua, reserve), which is as good: larger than
  -- every token handed out, and never issued to anyone else. The grant set
  -- the counter's lifetime, which is at least the lease (Options.FenceTTL).
  local tok = redis.call('GET', fence_key)
  if tok then
    tok = tonumber(tok)
  else
    -- The counter went while the claim lasted: evicted (a volatile-*
    -- maxmemory policy may pick it) or deleted. Recreate it as any
    -- acquisition does after the counter was lost: next_token issues a
    -- token from the server's clock, larger than every earlier one under
    -- the clock assumption (Lock.Token). Reporting the place lost
    -- instead would leave the lock held by this ticket, which nobody
    -- would take, until the claim lease ended.
    tok = next_token()
  end
  redis.call('PEXPIRE', lock_key, ttl)
  return {1, tok, tonumber(ttl)}
end
if cur and mode == '0' then
  return {0, 0, redis.call('PTTL', lock_key)} -- held, and we do not queue
end
if withdrawn(tombstone_key) then
  -- The client gave this ticket up (its call timed out, or its waiters
  -- left) and this request arrived late: it must not take the lock, nor
  -- queue for it.
  return {-2, 0, 0}
end
if mode == '2' then
  local entry = live_entry(pid)
  if not entry or string.sub(entry, -#ticket) ~= ticket then
    -- Our entry expired (the refresh came late: our place is gone, even if
    -- the hash still has the entry), the ticket was granted and that lease
    -- has ended since, or a newer ticket of ours stands there (this request
    -- is late and must not overwrite it). A grant message for the ticket
    -- may still be in flight: never reuse it, so that message cannot be
    -- taken for a live lease.
    return {-1, 0, 0}
  end
end
if mode ~= '0' then
  enqueue(pid, ticket, ttl, lease, mode == '2', cur) -- mode '2' found its entry live
end
if not cur then
  -- Free, and a queue exists (the caller may be in it): serve it in order
  -- instead of letting a newcomer barge in. If nobody in it is live any
  -- more (every entry expired), the caller takes the lock.
  local gpid, gticket, tok, gttl = grant_next(channel, pid)
  if not gpid then
    redis.call('SET', lock_key, ticket, 'PX', ttl)
    return {1, next_token(), tonumber(ttl)}
  end
  if gpid == pid then
    if gticket ~= ticket then
      -- An older ticket of ours was still queued: the grant is ours
      -- either way, and goes to the ticket the caller is waiting on.
      redis.call('SET', lock_key, ticket .. queued, 'PX', gttl)
    end
    return {1, tok, gttl}
  end
  return {0, 0, gttl}
end
return {0, 0, redis.call('PTTL', lock_key)}

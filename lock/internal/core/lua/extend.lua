-- extend: reset the lease to ARGV[2] ms if ARGV[1] still owns the lock
-- (its value is the ticket, followed by ' q' while processes are queued:
-- common.lua). PEXPIRE on the existing key only: an extend never re-creates
-- a lock that already expired (someone else may hold it by now).
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] or cur == ARGV[1] .. ' q' then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0

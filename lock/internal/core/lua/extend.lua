-- extend: reset the lease to ARGV[2] ms if ARGV[1] still owns the lock.
-- PEXPIRE on the existing key only: an extend never re-creates a lock
-- that expired, since someone else may hold it by now.
--
--   KEYS[1] lock   ARGV[1] owner   ARGV[2] the lease in ms
--
-- Returns 1 if the lease was reset, 0 if the owner no longer holds it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0

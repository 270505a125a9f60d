-- extend: reset the lease to ARGV[2] ms if ARGV[1] still owns the lock.
-- PEXPIRE on the existing key only: an extend never re-creates a lock that
-- already expired (someone else may hold it by now).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0

-- abandon: owner's acquire got no reply, so it may have run, or may still
-- run (a request delayed on the network arrives after its client gave
-- up). Give the owner up for good, whichever of the two reaches Redis
-- first: the tombstone makes a late acquire fail (acquire.lua), and a lock
-- the acquire did take is deleted.
--
--   KEYS[1] lock   KEYS[2] the owner's tombstone
--   ARGV[1] owner  ARGV[2] the tombstone's lifetime in ms: the lease (a
--           request later than that takes a lock whose lease nobody
--           renews, which ends on its own)
--
-- Returns 1 if the owner's lock was deleted.
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0

-- unlock: release a lock taken directly (core's acquire.lua) if nobody
-- stands in its line: core's compare and delete, with one look at the
-- line first. A lock with processes in line goes to the next of them, and
-- only release.lua, which has everything a grant needs, can do that; most
-- locks taken directly are released with nobody waiting, and this script
-- costs Redis less than that one.
--
--   KEYS[1] lock    the owner's UUID, with the lease as its TTL
--   KEYS[2] queue   the ids of the waiting processes (line.lua)
--   ARGV[1] owner   the releasing acquisition's owner
--
-- Returns 1 if the owner's lock was deleted; 0 if the owner no longer
-- holds it and the lock is held or nobody waits; -1, having changed
-- nothing, if processes wait and the lock is the owner's or free: release
-- it with release.lua, which hands it over. It is safe to repeat.
local lock, queue, owner = KEYS[1], KEYS[2], ARGV[1]
local cur = redis.call('GET', lock)
if redis.call('EXISTS', queue) == 1 and (cur == owner or not cur) then
  return -1
end
if cur == owner then
  return redis.call('DEL', lock)
end
return 0

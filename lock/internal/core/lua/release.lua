-- release: delete the lock if owner still holds it, compare and delete in
-- one script. A plain DEL deletes whoever holds the lock now, and GET then
-- DEL can delete the lock of whoever took it between the two (after the
-- caller's lease ran out): the next holder's critical section is no
-- longer exclusive (antipattern.PlainDelete, GetThenDelete; post 1 and
-- post 3 in docs/lock.md's References).
--
--   KEYS[1] lock   ARGV[1] owner
--
-- Returns 1 if the owner's lock was deleted, 0 if it was no longer there.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0

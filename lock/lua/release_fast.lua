-- release, fast path (the arguments are release.lua's). With no ticket to
-- queue: compare and delete, and pop the head of the queue; if nobody is
-- queued that is all (GET, DEL, LPOP). Otherwise the general path,
-- release.lua, goes on from what this found (cur), did (released) and
-- popped (head), if it looked at all (fetched). It issues no token, so it
-- comes first in the script, before token.lua defines its functions.
local cur, released, fetched, head = nil, 0, false, nil
if ARGV[3] == '' then
  fetched = true
  cur = redis.call('GET', KEYS[1])
  if cur == ARGV[1] then
    redis.call('DEL', KEYS[1])
    released = 1
    head = redis.call('LPOP', KEYS[3])
    if not head then
      return {1, 0, 0, 0, ''}
    end
  end
end

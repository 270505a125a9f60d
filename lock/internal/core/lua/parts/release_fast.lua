-- release, fast path (the arguments are release.lua's). With no ticket to
-- queue, and the lock's value our ticket alone, without the mark that
-- processes are queued (common.lua, queued): compare and delete, and
-- that is all (GET, DEL); nobody is owed the lock. Otherwise the general
-- path, release.lua, goes on from what this found (cur), if it looked at
-- all (fetched). It issues no token, so it comes first in the script,
-- before token.lua defines its functions.
local cur, fetched = nil, false
if ARGV[3] == '' then
  fetched = true
  cur = redis.call('GET', KEYS[1])
  if cur == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return {1, 0, 0, 0, ''}
  end
end

-- build.lua: set a product's counter from what the database says, unless
-- Redis has one. Replicas that find the counter missing at the same time
-- all build it; the first one's stands.
--
-- KEYS[1]  the product's counter, a hash: stock, reserved, sold, gen, epoch
-- KEYS[2]  the product's buyers, a set of user ids
-- ARGV[1]  stock, ARGV[2] reserved, ARGV[3] sold, ARGV[4] gen: the
--          counter to set
-- ARGV[5]  a new epoch: a random id of this build, which tells takes from
--          the counter this build replaced apart (undo.lua), and the moves
--          of orders the database made before this build read it from
--          those it made after (pay.lua, giveback.lua)
--
-- Returns {stock, reserved, sold, gen, built}: the counter as it is now,
-- and 1 if this call set it. A buyer set left without its counter is
-- emptied: it belonged to a counter that is gone, and the database's
-- unique index refuses the orders it would have refused.
local c = redis.call('HMGET', KEYS[1], 'stock', 'reserved', 'sold', 'gen')
if c[1] then
  return {tonumber(c[1]), tonumber(c[2] or '0'), tonumber(c[3]), tonumber(c[4]), 0}
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'stock', ARGV[1], 'reserved', ARGV[2], 'sold', ARGV[3], 'gen', ARGV[4], 'epoch', ARGV[5])
return {tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), 1}

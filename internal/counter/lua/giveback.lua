-- giveback.lua: put the units of cancelled or expired orders back on
-- sale, once the database has moved the orders out of pending, and let
-- their users buy again.
--
-- KEYS[1]  the product's counter, a hash: stock, reserved, sold, gen, epoch
-- KEYS[2]  the product's buyers, a set of user ids
-- ARGV[1]  the counter's epoch as read before the database's move
-- ARGV[2..] the orders' users, one per unit
--
-- The units go from reserved to the stock, whatever restock happened
-- since: a restock sets the stock on sale, and these units were not in it.
-- A counter built since that read (its epoch differs), or gone, is left
-- alone: the build may have read the orders already moved, and giving
-- their units back again would sell them twice. Returns 1 when it gave
-- them back, else 0.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return 0
end
local n = #ARGV - 1
redis.call('HINCRBY', KEYS[1], 'reserved', -n)
redis.call('HINCRBY', KEYS[1], 'stock', n)
for i = 2, #ARGV do
  redis.call('SREM', KEYS[2], ARGV[i])
end
return 1

-- undo.lua: give back what take.lua did for a user whose order could not
-- be written.
--
-- KEYS[1]  the product's counter, a hash: stock, reserved, sold, gen, epoch
-- KEYS[2]  the product's buyers, a set of user ids
-- ARGV[1]  the user
-- ARGV[2]  the epoch, ARGV[3] the generation, that take.lua returned
-- ARGV[4]  where take.lua put the item: 'sold' or 'reserved'
--
-- When the counter was built again since the take (its epoch differs), or
-- is gone, there is nothing to give back: it was built from the orders,
-- which never had this take, and the user may have bought from it since.
-- Otherwise the user leaves the buyers and the sold (or reserved) count
-- goes down by one; the stock goes up by one only if no restock has set
-- it since (the generation is unchanged): a restock's stock is the stock
-- to sell from then on. Returns 1 when it gave back, else 0.
local c = redis.call('HMGET', KEYS[1], 'epoch', 'gen')
if c[1] ~= ARGV[2] then
  return 0
end
if redis.call('SREM', KEYS[2], ARGV[1]) == 0 then
  return 0
end
redis.call('HINCRBY', KEYS[1], ARGV[4], -1)
if c[2] == ARGV[3] then
  redis.call('HINCRBY', KEYS[1], 'stock', 1)
end
return 1

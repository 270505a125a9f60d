-- take.lua: sell one item of a product to a user, or say why not. The
-- checks and the take are one script, so no other purchase can come
-- between them: this is what serialises the buyers of a product.
--
-- KEYS[1]  the product's counter, a hash: stock, reserved, sold, gen, epoch
-- KEYS[2]  the product's buyers, a set of user ids
-- KEYS[3]  optional: the order queue, a stream; the order is appended to
--          it in the same step as the take (redis-counter-async)
-- ARGV[1]  the user
-- ARGV[2]  where the item goes: 'sold' (an order final at once) or
--          'reserved' (a pending order, with a payment window)
-- ARGV[3]  with KEYS[3]: the product id
-- ARGV[4]  with KEYS[3]: the order's time, in Unix nanoseconds
--
-- Returns {epoch, gen} when the item is taken: which build of the counter
-- and which restock it was taken from, for undo.lua. Otherwise -1 when the
-- user is already a buyer, -2 when the stock is 0, -3 when there is no
-- counter (it must be built from the database first).
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return -1
end
local c = redis.call('HMGET', KEYS[1], 'stock', 'gen', 'epoch')
if not c[1] then
  return -3
end
if tonumber(c[1]) <= 0 then
  return -2
end
redis.call('HINCRBY', KEYS[1], 'stock', -1)
redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
redis.call('SADD', KEYS[2], ARGV[1])
if KEYS[3] then
  redis.call('XADD', KEYS[3], '*', 'product', ARGV[3], 'user', ARGV[1], 'at', ARGV[4])
end
return {c[3], c[2]}

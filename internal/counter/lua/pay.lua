-- pay.lua: count paid orders' units sold rather than reserved, once the
-- database has moved the orders from pending to paid.
--
-- KEYS[1]  the product's counter, a hash: stock, reserved, sold, gen, epoch
-- ARGV[1]  the counter's epoch as read before the database's move
-- ARGV[2]  how many orders were paid
--
-- A counter built since that read (its epoch differs), or gone, is left
-- alone: the build may have read the orders already paid, and moving them
-- again would count them twice. Returns 1 when it moved them, else 0.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'reserved', -tonumber(ARGV[2]))
redis.call('HINCRBY', KEYS[1], 'sold', tonumber(ARGV[2]))
return 1

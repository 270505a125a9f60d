-- restock.lua: set a product's stock in its counter. The reserved and sold
-- counts stay; the generation moves on, so that a take from before the
-- restock is not given back into the new stock (undo.lua), and so that the
-- database records the newer of two racing restocks.
--
-- KEYS[1]  the product's counter, a hash: stock, reserved, sold, gen
-- ARGV[1]  the new stock
--
-- Returns {stock, reserved, sold, gen} as the restock left them, or -3
-- when there is no counter (it must be built from the database first).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -3
end
redis.call('HSET', KEYS[1], 'stock', ARGV[1])
local gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)
local c = redis.call('HMGET', KEYS[1], 'reserved', 'sold')
return {tonumber(ARGV[1]), tonumber(c[1] or '0'), tonumber(c[2]), gen}

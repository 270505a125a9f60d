-- undo.lua: give back what take.lua did for a user whose order could not
-- be written.
--
-- KEYS[1]  the product's counter, a hash: stock, sold, gen
-- KEYS[2]  the product's buyers, a set of user ids
-- ARGV[1]  the user
-- ARGV[2]  the counter's generation that take.lua returned
--
-- The user leaves the buyers and the sold count goes down by one. The
-- stock goes up by one only if no restock has set it since (the
-- generation is unchanged): a restock's stock is the stock to sell from
-- then on. When the counter is gone, or the user is not among the buyers
-- (the counter was rebuilt from the database, which never counted this
-- take), there is nothing to give back. Returns 1 when it gave back, else 0.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if redis.call('SREM', KEYS[2], ARGV[1]) == 0 then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'sold', -1)
if redis.call('HGET', KEYS[1], 'gen') == ARGV[2] then
  redis.call('HINCRBY', KEYS[1], 'stock', 1)
end
return 1

package bench_test

import (
	"context"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/lock"
)

// floorLock is not a usable lock but a measure: the least that any lock
// giving each holder a fencing token from the server's clock spends, here
// as in BenchmarkLayers (lock/bench_test.go has the same floor). Its
// acquire is one script that runs SET NX PX, TIME and the fence counter's
// SET … GET (the rule of lock/internal/core/lua/token.lua, without its
// rare branch), its release bsm/redislock's compare-and-delete, and its
// Go side is what redislock's is at the least: a random owner and one
// go-redis Script.Run per call. It has no tombstone for an acquire whose
// reply was lost, no look at a line of waiting processes, no lease, no
// bookkeeping in the process. Its rate over redislock's, in the same
// round, bounds what the lock can reach with its token.
type floorLock struct {
	c   *redis.Client
	key string
}

var (
	floorAcquire = redis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
local t = redis.call('TIME')
local tok = t[1] .. string.sub('00000' .. t[2], -6)
local last = redis.call('SET', KEYS[2], tok, 'PX', ARGV[3], 'GET')
if last and (#last ~= #tok or last >= tok) then return -1 end
return tonumber(tok)`)
	floorRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)

func (f floorLock) Acquire(ctx context.Context) (func(), bool, error) {
	owner := uuid.NewString()
	tok, err := floorAcquire.Run(ctx, f.c, []string{f.key, f.key + ":fence"},
		owner, ttl.Milliseconds(), lock.DefaultFenceTTL.Milliseconds()).Int64()
	if err != nil || tok <= 0 {
		return nil, false, err
	}
	return func() { _ = floorRelease.Run(ctx, f.c, []string{f.key}, owner).Err() }, true, nil
}

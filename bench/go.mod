// Module bench compares this project's lock with the Go locks people use
// today, in one run against one redis-server. It is a module of its own so
// that its dependencies (redsync, bsm/redislock) never become the main
// module's.
module github.com/seckill-ref/seckill/bench

go 1.26.0

replace github.com/seckill-ref/seckill => ../

require (
	github.com/bsm/redislock v0.9.4
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/google/uuid v1.6.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/seckill-ref/seckill v0.0.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

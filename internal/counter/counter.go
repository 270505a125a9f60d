// Package counter is the Redis side of the counter designs (package
// seckill, counter.go): a stock counter and a buyer set per product, the
// Lua scripts that take, undo a take, build and restock, and, for a
// reservation's life in redis-counter, count a payment and give back the
// units of cancelled and expired orders; and, for redis-counter-async, the
// queue of orders not yet written, a Redis Stream read by the replicas'
// writers as one consumer group.
//
// Every key carries the hash tag {seckill-counter:<database id>}: one
// database's counters, buyers and queue, whatever else shares the Redis.
// The database's id (store.Store.ID) keeps a new database from meeting
// the counters of an old one whose products had the same ids; and one tag
// for all of them keeps a script that touches a product's counter, its
// buyers and the queue in one slot of a Redis Cluster, where the counters
// of every product then live on one node.
//
// Each script is a file in lua/ that reads as what Redis runs, compiled
// once and run with EVALSHA (EVAL when Redis does not have it cached).
package counter

import (
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-ref/seckill/internal/seckill"
)

var (
	_ seckill.Counter    = (*Counter)(nil)
	_ seckill.OrderQueue = (*Counter)(nil)
)

var (
	//go:embed lua/take.lua
	takeSrc string
	//go:embed lua/undo.lua
	undoSrc string
	//go:embed lua/build.lua
	buildSrc string
	//go:embed lua/restock.lua
	restockSrc string
	//go:embed lua/pay.lua
	paySrc string
	//go:embed lua/giveback.lua
	giveBackSrc string

	takeScript     = redis.NewScript(takeSrc)
	undoScript     = redis.NewScript(undoSrc)
	buildScript    = redis.NewScript(buildSrc)
	restockScript  = redis.NewScript(restockSrc)
	payScript      = redis.NewScript(paySrc)
	giveBackScript = redis.NewScript(giveBackSrc)
)

// Group is the consumer group of the order writers.
const Group = "writers"

// The replies of take.lua and restock.lua that are not a take or a counter.
const (
	replyBuyer     = -1
	replySoldOut   = -2
	replyNoCounter = -3
)

// Counter is one database's counters, and its order queue, in one Redis
// deployment. It is safe for concurrent use.
type Counter struct {
	rdb    redis.UniversalClient
	prefix string // the keys' hash tag and colon
}

// New returns the counters of the database with the given id, kept in rdb.
func New(rdb redis.UniversalClient, databaseID string) *Counter {
	return &Counter{rdb: rdb, prefix: "{seckill-counter:" + databaseID + "}:"}
}

func (c *Counter) counterKey(productID int64) string {
	return c.prefix + "product:" + strconv.FormatInt(productID, 10)
}

func (c *Counter) buyersKey(productID int64) string {
	return c.prefix + "buyers:" + strconv.FormatInt(productID, 10)
}

func (c *Counter) queueKey() string { return c.prefix + "orders" }

// Take runs take.lua without the queue, the item counted sold. The ticket
// is the counter's epoch and generation the item was taken from, and
// where it went, for Undo.
func (c *Counter) Take(ctx context.Context, productID int64, userID string) (string, error) {
	return c.take(ctx, productID, userID, "sold")
}

// Reserve runs take.lua without the queue, the item counted reserved.
func (c *Counter) Reserve(ctx context.Context, productID int64, userID string) (string, error) {
	return c.take(ctx, productID, userID, "reserved")
}

func (c *Counter) take(ctx context.Context, productID int64, userID, into string) (string, error) {
	reply, err := takeScript.Run(ctx, c.rdb, []string{c.counterKey(productID), c.buyersKey(productID)}, userID, into).Result()
	if err != nil {
		return "", fmt.Errorf("counter: take product %d for user %q: %w", productID, userID, err)
	}
	ticket, err := takeReply(productID, userID, reply)
	if err != nil {
		return "", err
	}
	return ticket + " " + into, nil
}

// TakeQueued runs take.lua with the queue: a taken item's order is
// appended to it in the same script. The item is counted sold: the async
// design's orders are final at once.
func (c *Counter) TakeQueued(ctx context.Context, o *seckill.Order) error {
	keys := []string{c.counterKey(o.ProductID), c.buyersKey(o.ProductID), c.queueKey()}
	reply, err := takeScript.Run(ctx, c.rdb, keys, o.UserID, "sold", o.ProductID, o.CreatedAt.UnixNano()).Result()
	if err != nil {
		return fmt.Errorf("counter: take product %d for user %q: %w", o.ProductID, o.UserID, err)
	}
	_, err = takeReply(o.ProductID, o.UserID, reply)
	return err
}

// takeReply translates take.lua's reply: the ticket "epoch gen" of a
// take, or the domain's sentinel of a refusal.
func takeReply(productID int64, userID string, reply any) (string, error) {
	switch r := reply.(type) {
	case []any:
		if len(r) == 2 {
			epoch, ok1 := r[0].(string)
			gen, ok2 := r[1].(string)
			if ok1 && ok2 {
				return epoch + " " + gen, nil
			}
		}
	case int64:
		switch r {
		case replyBuyer:
			return "", fmt.Errorf("counter: product %d, user %q: %w", productID, userID, seckill.ErrAlreadyPurchased)
		case replySoldOut:
			return "", fmt.Errorf("counter: product %d: %w", productID, seckill.ErrSoldOut)
		case replyNoCounter:
			return "", fmt.Errorf("counter: product %d: %w", productID, seckill.ErrNoCounter)
		}
	}
	return "", fmt.Errorf("counter: take product %d for user %q: unexpected reply %v", productID, userID, reply)
}

// Undo runs undo.lua with the ticket Take or Reserve returned.
func (c *Counter) Undo(ctx context.Context, productID int64, userID, ticket string) error {
	f := strings.Fields(ticket)
	if len(f) != 3 {
		return fmt.Errorf("counter: undo the take of product %d by user %q: ticket %q is not Take's", productID, userID, ticket)
	}
	err := undoScript.Run(ctx, c.rdb, []string{c.counterKey(productID), c.buyersKey(productID)}, userID, f[0], f[1], f[2]).Err()
	if err != nil {
		return fmt.Errorf("counter: undo the take of product %d by user %q: %w", productID, userID, err)
	}
	return nil
}

// Build runs build.lua.
func (c *Counter) Build(ctx context.Context, productID int64, want seckill.Count) (seckill.Count, bool, error) {
	v, err := buildScript.Run(ctx, c.rdb, []string{c.counterKey(productID), c.buyersKey(productID)},
		want.Stock, want.Reserved, want.Sold, want.Gen, rand.Text()).Int64Slice()
	if err != nil || len(v) != 5 {
		return seckill.Count{}, false, fmt.Errorf("counter: build the counter of product %d: %w (reply %v)", productID, err, v)
	}
	return seckill.Count{Stock: v[0], Reserved: v[1], Sold: v[2], Gen: v[3]}, v[4] == 1, nil
}

// Restock runs restock.lua.
func (c *Counter) Restock(ctx context.Context, productID, stock int64) (seckill.Count, error) {
	reply, err := restockScript.Run(ctx, c.rdb, []string{c.counterKey(productID)}, stock).Result()
	if err != nil {
		return seckill.Count{}, fmt.Errorf("counter: restock product %d: %w", productID, err)
	}
	if n, ok := reply.(int64); ok && n == replyNoCounter {
		return seckill.Count{}, fmt.Errorf("counter: restock product %d: %w", productID, seckill.ErrNoCounter)
	}
	v, ok := reply.([]any)
	if !ok || len(v) != 4 {
		return seckill.Count{}, fmt.Errorf("counter: restock product %d: unexpected reply %v", productID, reply)
	}
	var n [4]int64
	for i := range n {
		if n[i], ok = v[i].(int64); !ok {
			return seckill.Count{}, fmt.Errorf("counter: restock product %d: unexpected reply %v", productID, reply)
		}
	}
	return seckill.Count{Stock: n[0], Reserved: n[1], Sold: n[2], Gen: n[3]}, nil
}

// Epochs reads the products' counters' epochs, one HGET each, in one
// round trip: "" for a product that has no counter.
func (c *Counter) Epochs(ctx context.Context, productIDs []int64) ([]string, error) {
	cmds := make([]*redis.StringCmd, len(productIDs))
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range productIDs {
			cmds[i] = p.HGet(ctx, c.counterKey(id), "epoch")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("counter: read %d epoch(s): %w", len(productIDs), err)
	}
	epochs := make([]string, len(productIDs))
	for i, cmd := range cmds {
		epochs[i] = cmd.Val() // "" on redis.Nil
	}
	return epochs, nil
}

// Pay runs pay.lua.
func (c *Counter) Pay(ctx context.Context, productID int64, epoch string, n int) (bool, error) {
	moved, err := payScript.Run(ctx, c.rdb, []string{c.counterKey(productID)}, epoch, n).Int()
	if err != nil {
		return false, fmt.Errorf("counter: count %d paid order(s) of product %d: %w", n, productID, err)
	}
	return moved == 1, nil
}

// GiveBack runs giveback.lua.
func (c *Counter) GiveBack(ctx context.Context, productID int64, epoch string, users []string) (bool, error) {
	args := make([]any, 0, 1+len(users))
	args = append(args, epoch)
	for _, u := range users {
		args = append(args, u)
	}
	given, err := giveBackScript.Run(ctx, c.rdb, []string{c.counterKey(productID), c.buyersKey(productID)}, args...).Int()
	if err != nil {
		return false, fmt.Errorf("counter: give back %d unit(s) of product %d: %w", len(users), productID, err)
	}
	return given == 1, nil
}

// Counts reads the products' counters, each with one HMGET (atomic per
// product), in one round trip. A counter built before it had a reserved
// count has reserved 0.
func (c *Counter) Counts(ctx context.Context, productIDs []int64) ([]*seckill.Count, error) {
	cmds := make([]*redis.SliceCmd, len(productIDs))
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range productIDs {
			cmds[i] = p.HMGet(ctx, c.counterKey(id), "stock", "reserved", "sold", "gen")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("counter: read %d counter(s): %w", len(productIDs), err)
	}
	counts := make([]*seckill.Count, len(productIDs))
	for i, cmd := range cmds {
		v := cmd.Val()
		if len(v) != 4 || v[0] == nil {
			continue // no counter
		}
		if v[1] == nil {
			v[1] = "0"
		}
		var n [4]int64
		for j := range n {
			s, _ := v[j].(string)
			if n[j], err = strconv.ParseInt(s, 10, 64); err != nil {
				return nil, fmt.Errorf("counter: the counter of product %d holds %v: %w", productIDs[i], v, err)
			}
		}
		counts[i] = &seckill.Count{Stock: n[0], Reserved: n[1], Sold: n[2], Gen: n[3]}
	}
	return counts, nil
}

// Ping reports whether Redis answers.
func (c *Counter) Ping(ctx context.Context) error {
	return c.rdb.Ping(ctx).Err()
}

// Read reads new orders from the queue as consumer of the writers' group,
// creating the group (and the stream) when Redis does not have it: on
// first use, and after Redis lost its data.
func (c *Counter) Read(ctx context.Context, consumer string, max int, block time.Duration) ([]seckill.QueuedOrder, error) {
	if block <= 0 {
		block = -1 // go-redis: no BLOCK argument, where BLOCK 0 would wait forever
	}
	var streams []redis.XStream
	err := c.withGroup(ctx, func() error {
		var err error
		streams, err = c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: Group, Consumer: consumer, Streams: []string{c.queueKey(), ">"}, Count: int64(max), Block: block,
		}).Result()
		if errors.Is(err, redis.Nil) {
			return nil
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("counter: read the order queue: %w", err)
	}
	var msgs []redis.XMessage
	for _, s := range streams {
		msgs = append(msgs, s.Messages...)
	}
	return parseOrders(msgs)
}

// Claim takes over, for consumer, orders given to a writer at least
// minIdle ago and never acknowledged (XAUTOCLAIM).
func (c *Counter) Claim(ctx context.Context, consumer string, minIdle time.Duration, max int) ([]seckill.QueuedOrder, error) {
	var msgs []redis.XMessage
	err := c.withGroup(ctx, func() error {
		var err error
		msgs, _, err = c.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: c.queueKey(), Group: Group, Consumer: consumer, MinIdle: minIdle, Start: "0-0", Count: int64(max),
		}).Result()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("counter: claim from the order queue: %w", err)
	}
	return parseOrders(msgs)
}

// Ack acknowledges written orders and deletes them from the stream, in
// one transaction, so that the stream holds only orders not yet written.
func (c *Counter) Ack(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAck(ctx, c.queueKey(), Group, ids...)
		p.XDel(ctx, c.queueKey(), ids...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("counter: acknowledge %d written order(s): %w", len(ids), err)
	}
	return nil
}

// QueueLength is how many orders the queue holds: not yet written, or
// written and not yet acknowledged.
func (c *Counter) QueueLength(ctx context.Context) (int64, error) {
	return c.rdb.XLen(ctx, c.queueKey()).Result()
}

// withGroup runs fn, and again after creating the writers' group if fn
// found none.
func (c *Counter) withGroup(ctx context.Context, fn func() error) error {
	err := fn()
	if err == nil || !strings.HasPrefix(err.Error(), "NOGROUP") {
		return err
	}
	// From the stream's first entry: orders queued before the group
	// existed are read too.
	if err := c.rdb.XGroupCreateMkStream(ctx, c.queueKey(), Group, "0").Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return err
	}
	return fn()
}

// parseOrders reads the queue's entries: product, user and time.
func parseOrders(msgs []redis.XMessage) ([]seckill.QueuedOrder, error) {
	orders := make([]seckill.QueuedOrder, 0, len(msgs))
	for _, m := range msgs {
		if len(m.Values) == 0 {
			continue // deleted since it was queued (Redis 6.2's XAUTOCLAIM still lists it)
		}
		product, err1 := strconv.ParseInt(fmt.Sprint(m.Values["product"]), 10, 64)
		at, err2 := strconv.ParseInt(fmt.Sprint(m.Values["at"]), 10, 64)
		user, ok := m.Values["user"].(string)
		if err := errors.Join(err1, err2); err != nil || !ok {
			return nil, fmt.Errorf("counter: order queue entry %s is not an order: %v", m.ID, m.Values)
		}
		orders = append(orders, seckill.QueuedOrder{ID: m.ID, Order: &seckill.Order{
			ProductID: product, UserID: user, CreatedAt: time.Unix(0, at).UTC(),
		}})
	}
	return orders, nil
}

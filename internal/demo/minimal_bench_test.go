package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/seckill"
	"github.com/seckill-ref/seckill/internal/testinfra/pgproc"
	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/store"
)

// BenchmarkMinimalForms holds each design without a lock to its simplest
// honest form: the same design written as directly as it can be, on the
// same stack (gin, GORM, go-redis), with nothing but its decision and its
// write, and measured the same way. For each design, database and round,
// the project's 2 replicas and the minimal form's 2, first one and then
// the other in turn from round to round, sell one hot product that does
// not sell out, each request a new buyer, in a closed loop of 256
// connections, as BenchmarkDesigns does:
//
//	go test -run '^$' -bench MinimalForms -benchtime 5000x ./internal/demo -design-rounds 3
//
// The minimal forms (minimalServer): conditional is one transaction, an
// UPDATE ... WHERE stock > 0 and the order's insert, with a read of the
// buyer's order only when the update matched nothing; redis-counter is one
// Lua script (buyer set, stock) and the order's insert, given back if the
// insert fails; redis-counter-async is the same script with an XADD of the
// order, answered at once, and a writer per replica that reads the stream
// in batches, inserts them and acknowledges. They answer a purchase only:
// no middleware, no metrics, no validation beyond the body's shape.
func BenchmarkMinimalForms(b *testing.B) {
	rds := benchRedis(b)
	pg := pgtest.Start(b, pgproc.Options{Durable: true, Settings: map[string]string{"synchronous_commit": "off"}})
	rdb := redis.NewClient(&redis.Options{Addr: rds.addr})
	b.Cleanup(func() { _ = rdb.Close() })
	for round := 1; round <= *benchRounds; round++ {
		for _, db := range benchDatabases {
			for _, d := range benchDesigns {
				if d.name == "lock" {
					continue
				}
				name := fmt.Sprintf("round=%d/db=%s/design=%s", round, db, d.name)
				database := func() string {
					if db == "postgres" {
						return pgtest.NewDatabase(b, pg)
					}
					return filepath.Join(b.TempDir(), "seckill.db")
				}
				project := func() {
					c := benchCluster(b, rds, func(cfg *app.Config) {
						d.edit(cfg)
						if db == "postgres" {
							cfg.Database = database()
						}
					})
					id := benchProduct(b, c, seckill.MaxStock)
					b.Run(name+"/project", func(b *testing.B) {
						closedLoop(b, c, purchaseTarget(c, id), http.StatusCreated)
					})
					c.close(b)
				}
				minimal := func() {
					m := startMinimal(b, d.name, database(), rdb)
					b.Run(name+"/minimal", func(b *testing.B) {
						closedLoop(b, m.site, purchaseTarget(m.site, m.product), http.StatusCreated)
					})
					m.close(b)
				}
				// Whichever runs first in a round runs second in the
				// next: the order must not favour either.
				if round%2 == 1 {
					project()
					minimal()
				} else {
					minimal()
					project()
				}
			}
		}
	}
}

// minimalSite is two replicas of a minimal form, their product, and what
// stops them.
type minimalSite struct {
	site    *benchSite
	product int64
	servers []*http.Server
	writers sync.WaitGroup
	stop    context.CancelFunc
	dbs     []*gorm.DB
	clients []*redis.Client
}

// minimalOrder is the orders table, as the minimal forms write it.
type minimalOrder struct {
	ID        int64     `json:"id" gorm:"primaryKey"`
	ProductID int64     `json:"product_id"`
	UserID    string    `json:"user_id"`
	Fence     int64     `json:"fence"`
	CreatedAt time.Time `json:"created_at"`
}

func (minimalOrder) TableName() string { return "orders" }

// The minimal counter's script and its async twin: KEYS are the stock
// counter, the buyer set and (async) the order stream.
var (
	minimalTake = redis.NewScript(`
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return -1 end
local stock = tonumber(redis.call('GET', KEYS[1]))
if not stock or stock <= 0 then return 0 end
redis.call('DECR', KEYS[1])
redis.call('SADD', KEYS[2], ARGV[1])
return 1`)
	minimalTakeQueued = redis.NewScript(`
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return -1 end
local stock = tonumber(redis.call('GET', KEYS[1]))
if not stock or stock <= 0 then return 0 end
redis.call('DECR', KEYS[1])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('XADD', KEYS[3], '*', 'p', ARGV[2], 'u', ARGV[1], 't', ARGV[3])
return 1`)
)

// startMinimal starts two replicas of the minimal form of design on
// database (migrated by the project's store, so that the tables and
// indexes are the same) with a product of seckill.MaxStock.
func startMinimal(b *testing.B, design, database string, rdb *redis.Client) *minimalSite {
	b.Helper()
	st, err := store.Open(database)
	if err != nil {
		b.Fatal(err)
	}
	p := &seckill.Product{Name: "minimal", Stock: seckill.MaxStock}
	if err := st.CreateProduct(context.Background(), p); err != nil {
		b.Fatal(err)
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	tag := fmt.Sprintf("{minimal:%d:%d}", time.Now().UnixNano(), p.ID)
	keys := []string{tag + ":stock", tag + ":buyers", tag + ":orders"}
	ctx, stop := context.WithCancel(context.Background())
	m := &minimalSite{product: p.ID, stop: stop}
	if design != "conditional" {
		if err := rdb.Set(ctx, keys[0], seckill.MaxStock, 0).Err(); err != nil {
			b.Fatal(err)
		}
		if err := rdb.XGroupCreateMkStream(ctx, keys[2], "writers", "0").Err(); err != nil {
			b.Fatal(err)
		}
	}
	var urls []string
	for i := range 2 {
		db := minimalDB(b, database)
		m.dbs = append(m.dbs, db)
		r := gin.New()
		// Each replica its own Redis client, as the project's replicas
		// have: a shared one would give the two a pool of connections
		// the project's do not share.
		client := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
		m.clients = append(m.clients, client)
		r.POST("/api/v1/products/:id/purchase", minimalHandler(design, db, client, keys))
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: r}
		m.servers = append(m.servers, srv)
		go func() { _ = srv.Serve(ln) }()
		urls = append(urls, "http://"+ln.Addr().String())
		if design == "redis-counter-async" {
			m.writers.Go(func() { minimalWriter(ctx, db, client, keys[2], fmt.Sprintf("w%d", i)) })
		}
	}
	m.site = &benchSite{cluster: &cluster{urls: urls}, transport: newBenchTransport()}
	return m
}

// minimalDB opens database as a replica of the minimal forms does: the
// same pool sizes as the project's store, no GORM logging, no default
// transaction around single statements.
func minimalDB(b *testing.B, database string) *gorm.DB {
	b.Helper()
	dialect := sqlite.Open(database + "?_busy_timeout=5000&_txlock=immediate")
	if store.IsPostgres(database) {
		dialect = postgres.Open(database)
	}
	db, err := gorm.Open(dialect, &gorm.Config{Logger: logger.Discard, SkipDefaultTransaction: true, TranslateError: true})
	if err != nil {
		b.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		b.Fatal(err)
	}
	sqlDB.SetMaxOpenConns(16)
	sqlDB.SetMaxIdleConns(16)
	return db
}

var errMinimalSoldOut = errors.New("sold out")

// minimalHandler is a purchase in design's minimal form.
func minimalHandler(design string, db *gorm.DB, rdb *redis.Client, keys []string) gin.HandlerFunc {
	return func(c *gin.Context) {
		var in struct {
			UserID string `json:"user_id"`
		}
		id, err := strconv.ParseInt(c.Param("id"), 10, 64)
		if err != nil || c.ShouldBindJSON(&in) != nil || in.UserID == "" {
			c.JSON(http.StatusBadRequest, gin.H{"error": "invalid"})
			return
		}
		ctx := c.Request.Context()
		o := minimalOrder{ProductID: id, UserID: in.UserID, CreatedAt: time.Now().UTC()}
		switch design {
		case "conditional":
			err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				res := tx.Exec("UPDATE products SET stock = stock - 1, sold = sold + 1 WHERE id = ? AND stock > 0", id)
				if res.Error != nil {
					return res.Error
				}
				if res.RowsAffected == 0 {
					return errMinimalSoldOut
				}
				return tx.Create(&o).Error
			})
			if errors.Is(err, errMinimalSoldOut) {
				var n int64
				if err := db.WithContext(ctx).Model(&minimalOrder{}).Where("product_id = ? AND user_id = ?", id, in.UserID).Count(&n).Error; err == nil && n > 0 {
					c.JSON(http.StatusConflict, gin.H{"error": "already_purchased"})
					return
				}
				c.JSON(http.StatusConflict, gin.H{"error": "sold_out"})
				return
			}
		case "redis-counter", "redis-counter-async":
			var took int64
			if design == "redis-counter" {
				took, err = minimalTake.Run(ctx, rdb, keys[:2], in.UserID).Int64()
			} else {
				took, err = minimalTakeQueued.Run(ctx, rdb, keys, in.UserID, id, o.CreatedAt.Format(time.RFC3339Nano)).Int64()
			}
			switch {
			case err != nil:
			case took == -1:
				c.JSON(http.StatusConflict, gin.H{"error": "already_purchased"})
				return
			case took == 0:
				c.JSON(http.StatusConflict, gin.H{"error": "sold_out"})
				return
			case design == "redis-counter":
				if err = db.WithContext(ctx).Create(&o).Error; err != nil {
					rdb.SRem(ctx, keys[1], in.UserID)
					rdb.Incr(ctx, keys[0])
				}
			}
		}
		if err != nil {
			if errors.Is(err, gorm.ErrDuplicatedKey) {
				c.JSON(http.StatusConflict, gin.H{"error": "already_purchased"})
				return
			}
			c.JSON(http.StatusInternalServerError, gin.H{"error": "internal"})
			return
		}
		c.JSON(http.StatusCreated, gin.H{"order": o})
	}
}

// minimalWriter is the async form's writer: it reads the stream in
// batches, inserts each batch and acknowledges it, until ctx ends.
func minimalWriter(ctx context.Context, db *gorm.DB, rdb *redis.Client, stream, consumer string) {
	for ctx.Err() == nil {
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "writers", Consumer: consumer,
			Streams: []string{stream, ">"}, Count: 256, Block: 20 * time.Millisecond}).Result()
		if err != nil || len(res) == 0 {
			continue
		}
		var orders []minimalOrder
		var ids []string
		for _, msg := range res[0].Messages {
			p, _ := strconv.ParseInt(fmt.Sprint(msg.Values["p"]), 10, 64)
			t, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(msg.Values["t"]))
			orders = append(orders, minimalOrder{ProductID: p, UserID: fmt.Sprint(msg.Values["u"]), CreatedAt: t})
			ids = append(ids, msg.ID)
		}
		if db.WithContext(ctx).CreateInBatches(orders, 500).Error == nil {
			rdb.XAck(ctx, stream, "writers", ids...)
		}
	}
}

// close stops the minimal replicas and their writers.
func (m *minimalSite) close(b *testing.B) {
	m.site.transport.CloseIdleConnections()
	for _, srv := range m.servers {
		if err := srv.Close(); err != nil {
			b.Error(err)
		}
	}
	m.stop()
	m.writers.Wait()
	for _, c := range m.clients {
		_ = c.Close()
	}
	for _, db := range m.dbs {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	}
}

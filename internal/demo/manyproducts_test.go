package demo

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/seckill-ref/seckill/internal/apiclient"
)

// createConns is how many products are created at once through the API.
// Each creation is one INSERT: more at once only queue for the database's
// write lock (SQLite) or its connections.
const createConns = 64

// createProducts creates n products with stock through the API, createConns
// at a time, and returns their ids in creation order and how long it took.
func createProducts(tb testing.TB, c *benchSite, n int, stock int64) ([]int64, time.Duration) {
	tb.Helper()
	ids := make([]int64, n)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: createConns}, Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, createConns)
	start := time.Now()
	for w := range createConns {
		wg.Go(func() {
			api := apiclient.New(hc, c.urls[w%len(c.urls)], c.token)
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				p, err := api.CreateProduct(context.Background(), "product-"+strconv.Itoa(i), stock)
				if err != nil {
					errs[w] = err
					return
				}
				ids[i] = p.ID
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		tb.Fatalf("create %d products: %v", n, err)
	}
	return ids, took
}

// eachOnceTarget buys the products of ids in turn, one purchase each, each
// by a new buyer, spread round-robin over the replicas; past the end of
// ids it starts over.
func eachOnceTarget(c *benchSite, ids []int64) vegeta.Targeter {
	var n atomic.Uint64
	header := http.Header{"Content-Type": []string{"application/json"}}
	return func(t *vegeta.Target) error {
		i := n.Add(1) - 1
		t.Method = http.MethodPost
		t.URL = c.urls[i%uint64(len(c.urls))] + "/api/v1/products/" + strconv.FormatInt(ids[i%uint64(len(ids))], 10) + "/purchase"
		t.Body = []byte(`{"user_id":"bench-` + strconv.FormatInt(benchUser.Add(1), 10) + `"}`)
		t.Header = header
		return nil
	}
}

// sellEachOnce buys every product of ids once, conns purchases at a time
// in a closed loop, and fails tb unless every answer is a 201. It returns
// how long the sale took.
func sellEachOnce(tb testing.TB, c *benchSite, ids []int64, conns int) time.Duration {
	tb.Helper()
	attacker := vegeta.NewAttacker(
		vegeta.Client(&http.Client{Transport: c.transport, Timeout: 30 * time.Second}),
		vegeta.Workers(uint64(conns)), vegeta.MaxWorkers(uint64(conns)), vegeta.MaxBody(512))
	other := map[string]int{}
	start := time.Now()
	for r := range attacker.Attack(eachOnceTarget(c, ids), boundedBench{max: uint64(len(ids))}, 0, "each-once") {
		if r.Code != http.StatusCreated {
			other[fmt.Sprintf("%d %s", r.Code, r.Error)]++
		}
	}
	took := time.Since(start)
	if len(other) > 0 {
		tb.Fatalf("selling %d products once each: answers other than 201: %v", len(ids), other)
	}
	return took
}

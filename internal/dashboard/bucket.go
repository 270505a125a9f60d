package dashboard

import (
	"cmp"
	"maps"
	"slices"
	"strconv"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// bucket is one second of one replica.
type bucket struct {
	outcomes      map[seckill.Outcome]int64
	wait          []int64 // per WaitBuckets bound, and one more past the last
	fenceRejected int64
	leasesLost    int64
	orders        map[int64]int64 // by product
	closed        map[seckill.OrderState]int64
}

// busiest returns the ids of the (at most) k products with the most
// orders in b, most first, ties by id.
func (b *bucket) busiest(k int) []int64 {
	ids := slices.Collect(maps.Keys(b.orders))
	slices.SortFunc(ids, func(x, y int64) int {
		return cmp.Or(cmp.Compare(b.orders[y], b.orders[x]), cmp.Compare(x, y))
	})
	return ids[:min(k, len(ids))]
}

// fields are the hash fields of b: counts to add, and values to set. Of
// the products, only those of busiest get fields of their own; the
// orders of all go into fieldOrdersAll.
func (b *bucket) fields(replica string, busiest []int64, samples map[int64]*seckill.Product) (incr, set map[string]int64) {
	incr = map[string]int64{}
	for o, n := range b.outcomes {
		incr[fieldOutcome+string(o)] = n
	}
	for i, n := range b.wait {
		if n > 0 {
			incr[fieldWait+strconv.Itoa(i)] = n
		}
	}
	if b.fenceRejected > 0 {
		incr[fieldFence] = b.fenceRejected
	}
	if b.leasesLost > 0 {
		incr[fieldLost] = b.leasesLost
	}
	for st, n := range b.closed {
		incr[fieldClosed+string(st)] = n
	}
	var orders int64
	for _, n := range b.orders {
		orders += n
	}
	if orders > 0 {
		incr[fieldOrdersAll] = orders
	}
	set = map[string]int64{fieldReplica + replica: 1}
	for _, id := range busiest {
		key := strconv.FormatInt(id, 10)
		incr[fieldOrders+key] = b.orders[id]
		if p, ok := samples[id]; ok {
			set[fieldStock+key] = p.Stock
			set[fieldSold+key] = p.Sold
			if p.Reserved != 0 {
				set[fieldReserved+key] = p.Reserved // absent: none
			}
		}
	}
	return incr, set
}

// Hash field prefixes of a second's bucket.
const (
	fieldOutcome   = "o:" // o:<outcome>: purchases that ended so
	fieldWait      = "w:" // w:<i>: acquisitions that waited at most WaitBuckets[i] (i = len: more)
	fieldFence     = "fence"
	fieldLost      = "lost"
	fieldOrdersAll = "orders" // orders committed, every product
	fieldOrders    = "n:"     // n:<product>: orders committed, of a replica's sampleTop busiest
	fieldStock     = "s:"     // s:<product>: stock, sampled from the database after the second
	fieldSold      = "d:"     // d:<product>: sold, likewise
	fieldReserved  = "v:"     // v:<product>: reserved, likewise, when not 0
	fieldClosed    = "c:"     // c:<state>: orders that left pending for paid, cancelled or expired
	fieldReplica   = "r:"     // r:<replica>: that replica reported this second
)

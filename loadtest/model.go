package loadtest

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The sequential specification of the API that the linearizability check
// holds every history to (github.com/anishathalye/porcupine). One product
// is one partition: operations on different products never interact, so
// each product's operations are checked on their own.
//
// The state of a product is its stock (available), reserved and sold
// counts, the state of the orders its history names, and which repeat
// buyers hold an order the history cannot name. The operations and what
// the specification says they answer:
//
//   - create (the set-up's POST, or its read of an existing product): the
//     product comes to exist with the state answered.
//   - read (GET /api/v1/products/:id): exactly the state's stock, reserved
//     and sold.
//   - purchase(user), by the service's rules in their order: 409
//     already_purchased when the user holds a live order, pending or paid
//     (checked first, so also when sold out); else 409 sold_out when the
//     stock is 0 or less; else 201, and the stock goes down by one, and
//     the order answered is made: pending, its unit reserved, when the
//     product's orders have a payment window, else paid, its unit sold.
//   - restock(n) (PUT /api/v1/products/:id/stock): the stock becomes n, and
//     the answer is the state it set: stock n, reserved and sold unchanged.
//   - pay(order) (POST /api/v1/orders/:id/pay): a pending order becomes
//     paid, its unit moving from reserved to sold: 200. An order that left
//     pending answers 409 order_paid, order_cancelled or order_expired, by
//     its state; a pending order whose window has ended answers 409
//     order_expired too, and changes nothing.
//   - cancel(order) (POST /api/v1/orders/:id/cancel): as pay, but the order
//     becomes cancelled and its unit goes back to the stock.
//   - expire(orders): not a request, but an expiry round of the service,
//     rebuilt from the orders listed after the sale (see expiries): each of
//     its orders must be pending, and becomes expired, and their units go
//     back from reserved to the stock, all at once.
//
// Time enters in two places only, both through the interval of the
// operation, on the clock the service and the load test share: an expiry
// round cannot take effect before the window of each of its orders has
// ended (its interval starts there), and a payment or a cancel called
// after its order's window ended cannot succeed (late), while one that
// returned before it ended cannot find the window over (early).
//
// An ambiguous operation (no answer, or a 5xx other than busy) may or may
// not have taken effect. It stays open to the end of the history, and the
// specification applies its effect, whatever it answered: a purchase
// sells if the rules allow, a restock sets the stock, a payment pays a
// pending order if it was not late. Linearized where it took effect, that
// is exactly what happened; if it never took effect, it is linearized
// after every other operation, where its effect is seen by nobody. So one
// deterministic step covers both cases. Most ambiguous purchases are
// settled before the check by the orders listed after the sale (see
// settle): left out if they made no order, or held to a 201 that landed
// before the orders were listed if they did.
//
// Orders are tracked (given a byte of the state) only when the history
// names them more than once, or when a repeat buyer made them: an order
// made and never named again changes no later answer, so leaving it out
// keeps the states that the checker compares small, as does tracking who
// holds an order only for the users with two or more purchases in the
// product's history (the repeat buyers). The users of a run are new (the
// run's prefix), so nobody holds an order at the start.

// linInput is what an operation asked for.
type linInput struct {
	kind    OpKind
	product int64
	user    string // purchase, pay, cancel
	bit     int    // purchase: the user's index among the repeat buyers, -1 if not one
	set     int64  // restock: the stock set
	// relaxed: the search for the smallest anomaly no longer holds the
	// operation to its answer; it may or may not have taken effect (see
	// linRelaxedModel).
	relaxed bool

	// reserve: the product's orders have a payment window, so a purchase
	// reserves its unit rather than selling it.
	reserve bool
	// order is the tracked order a purchase makes or a payment or a cancel
	// moves, -1 if it is not tracked.
	order int
	// mine: a purchase by a repeat buyer: the tracked orders that buyer
	// makes in the history. The buyer holds an order when one of them is
	// pending or paid (or when bit is set in the state).
	mine []int
	// loose: a purchase by a repeat buyer who may hold an order the
	// history cannot name (an ambiguous purchase of theirs that no order
	// settles) while orders have a window, so that it may also have ended:
	// whether the buyer holds an order is not known, and either answer is
	// allowed.
	loose bool
	// late: a payment or a cancel called after its order's window ended,
	// which cannot succeed; early: one that returned before the window
	// ended, which cannot find it over.
	late, early bool
	// moved are the tracked orders an expiry moves, and units how many
	// orders it moves, tracked or not.
	moved []int
	units int64
}

// linOutput is what it answered.
type linOutput struct {
	ambiguous bool   // may or may not have taken effect; the answer is unknown
	outcome   string // purchase, pay, cancel: outCreated, outOK or "409 code"
	// create, read, restock: the product answered.
	stock, reserved, sold int64
}

// Outcomes in the model.
const (
	outCreated          = "201"
	outSoldOut          = "409 " + codeSoldOut
	outAlreadyPurchased = "409 " + codeAlreadyPurchased
	outOK               = "200"
	outOrderPaid        = "409 " + codeOrderPaid
	outOrderCancelled   = "409 " + codeOrderCancelled
	outOrderExpired     = "409 " + codeOrderExpired
)

// The states of a tracked order: one byte each in linState.orders.
const (
	ordNone byte = iota // not made yet
	ordPending
	ordPaid
	ordCancelled
	ordExpired
)

// linState is one product's state.
type linState struct {
	exists                bool
	stock, reserved, sold int64
	// bought is a bit set over the repeat buyers: who holds an order the
	// history cannot name (an ambiguous purchase that took effect and no
	// order settles).
	bought string
	// orders holds the state of each tracked order, a byte each.
	orders string
}

func (s linState) has(bit int) bool {
	return bit >= 0 && bit/8 < len(s.bought) && s.bought[bit/8]&(1<<(bit%8)) != 0
}

// with returns the bit set with bit added; the string is never modified in
// place, so states can share it.
func (s linState) with(bit int) string {
	if bit < 0 {
		return s.bought
	}
	b := []byte(s.bought)
	for len(b) <= bit/8 {
		b = append(b, 0)
	}
	b[bit/8] |= 1 << (bit % 8)
	return string(b)
}

// order is the state of tracked order i.
func (s linState) order(i int) byte {
	if i < 0 || i >= len(s.orders) {
		return ordNone
	}
	return s.orders[i]
}

// withOrders returns the orders with each of is set to st; the string is
// never modified in place.
func (s linState) withOrders(st byte, is ...int) string {
	b := []byte(s.orders)
	for _, i := range is {
		for len(b) <= i {
			b = append(b, ordNone)
		}
		b[i] = st
	}
	return string(b)
}

// holds reports whether a buyer who makes the tracked orders mine (and
// whose bit is bit) holds a live order: pending or paid.
func (s linState) holds(bit int, mine []int) bool {
	if s.has(bit) {
		return true
	}
	for _, i := range mine {
		if st := s.order(i); st == ordPending || st == ordPaid {
			return true
		}
	}
	return false
}

// linStep is the specification: whether an operation with input in could
// have answered out in state s, and the state after it.
func linStep(s linState, in linInput, out linOutput) (bool, linState) {
	if !s.exists && in.kind != OpCreate && in.kind != OpRead {
		return false, s
	}
	switch in.kind {
	case OpCreate:
		if s.exists || out.ambiguous {
			return false, s
		}
		return true, linState{exists: true, stock: out.stock, reserved: out.reserved, sold: out.sold}
	case OpRead:
		if !s.exists {
			// The first look at a product that existed before the run.
			return !out.ambiguous, linState{exists: true, stock: out.stock, reserved: out.reserved, sold: out.sold}
		}
		return !out.ambiguous && out.stock == s.stock && out.reserved == s.reserved && out.sold == s.sold, s
	case OpPurchase:
		return purchaseStep(s, in, out)
	case OpRestock:
		next := s
		next.stock = in.set
		return out.ambiguous || (out.stock == in.set && out.reserved == s.reserved && out.sold == s.sold), next
	case OpPay, OpCancel:
		return moveStep(s, in, out)
	case OpExpire:
		if s.reserved < in.units {
			return false, s
		}
		for _, i := range in.moved {
			if s.order(i) != ordPending {
				return false, s
			}
		}
		next := s
		next.orders = s.withOrders(ordExpired, in.moved...)
		next.reserved -= in.units
		next.stock += in.units
		return true, next
	}
	return false, s
}

// purchaseStep is linStep for a purchase.
func purchaseStep(s linState, in linInput, out linOutput) (bool, linState) {
	if in.loose && !out.ambiguous {
		// Whether the buyer holds an order is not known: any answer the
		// stock allows, and already_purchased whatever it is.
		switch out.outcome {
		case outAlreadyPurchased:
			return true, s
		case outSoldOut:
			return s.stock <= 0, s
		}
	}
	var want string
	next := s
	switch {
	case !in.loose && s.holds(in.bit, in.mine):
		want = outAlreadyPurchased
	case s.stock <= 0:
		want = outSoldOut
	default:
		want = outCreated
		next.stock--
		st := ordPaid
		if in.reserve {
			st = ordPending
			next.reserved++
		} else {
			next.sold++
		}
		switch {
		case in.order >= 0:
			if s.order(in.order) != ordNone {
				return false, s // an order is made once
			}
			next.orders = s.withOrders(st, in.order)
		case !in.reserve:
			// An order the history cannot name: held for good, as
			// orders without a window are final.
			next.bought = s.with(in.bit)
		}
	}
	return out.ambiguous || out.outcome == want, next
}

// moveStep is linStep for a payment or a cancel of an order.
func moveStep(s linState, in linInput, out linOutput) (bool, linState) {
	next := s
	if in.order < 0 {
		// An order the history does not track: any answer, and a success
		// moves its unit.
		if out.outcome == outOK {
			next.reserved--
			if in.kind == OpPay {
				next.sold++
			} else {
				next.stock++
			}
		}
		return true, next
	}
	var want []string
	switch s.order(in.order) {
	case ordNone:
		// Not made yet: the service answers 404, which is left out of
		// the history, so only a lost answer fits.
		return out.ambiguous, s
	case ordPaid:
		want = []string{outOrderPaid}
	case ordCancelled:
		want = []string{outOrderCancelled}
	case ordExpired:
		want = []string{outOrderExpired}
	case ordPending:
		if !in.early {
			want = append(want, outOrderExpired) // the window may have ended
		}
		if !in.late {
			want = append(want, outOK)
			if out.ambiguous || out.outcome == outOK {
				next.reserved--
				if in.kind == OpPay {
					next.orders = s.withOrders(ordPaid, in.order)
					next.sold++
				} else {
					next.orders = s.withOrders(ordCancelled, in.order)
					next.stock++
				}
			}
		}
	}
	return out.ambiguous || slices.Contains(want, out.outcome), next
}

// linModel is the porcupine model over linStep, partitioned by product.
var linModel = porcupine.Model{
	Partition: partitionByProduct,
	Init:      func() any { return linState{} },
	Step: func(state, input, output any) (bool, any) {
		return linStep(state.(linState), input.(linInput), output.(linOutput))
	},
	Equal:             func(a, b any) bool { return a.(linState) == b.(linState) },
	Hash:              func(state any) uint64 { return state.(linState).hash() },
	DescribeOperation: describeOperation,
	DescribeState:     describeState,
	DescribeOperationMetadata: func(info any) string {
		if s, ok := info.(string); ok {
			return s
		}
		return ""
	},
}

// linRelaxedModel is linModel with relaxed operations, for the search for
// the smallest anomaly. A relaxed operation may or may not have taken
// effect within its interval: the step has two outcomes, so the model is
// nondeterministic (porcupine tracks the set of states a prefix can be
// in). An operation that really took effect at some point of its interval
// is one of the two, so relaxing one never turns a linearizable history
// into one that is not.
var linRelaxedModel = (&porcupine.NondeterministicModel{
	Partition: partitionByProduct,
	Init:      func() []any { return []any{linState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(linState), input.(linInput), output.(linOutput)
		if !in.relaxed {
			if ok, next := linStep(s, in, out); ok {
				return []any{next}
			}
			return nil
		}
		out.ambiguous = true
		ok, next := linStep(s, in, out)
		if !ok || next == s {
			return []any{s}
		}
		return []any{s, next}
	},
	Equal:             func(a, b any) bool { return a.(linState) == b.(linState) },
	Hash:              func(state any) uint64 { return state.(linState).hash() },
	DescribeOperation: describeOperation,
	DescribeState:     describeState,
}).ToModel()

func partitionByProduct(ops []porcupine.Operation) [][]porcupine.Operation {
	var order []int64
	byProduct := map[int64][]porcupine.Operation{}
	for _, op := range ops {
		p := op.Input.(linInput).product
		if _, ok := byProduct[p]; !ok {
			order = append(order, p)
		}
		byProduct[p] = append(byProduct[p], op)
	}
	parts := make([][]porcupine.Operation, len(order))
	for i, p := range order {
		parts[i] = byProduct[p]
	}
	return parts
}

func (s linState) hash() uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%t/%d/%d/%d/%d/", s.exists, s.stock, s.reserved, s.sold, len(s.bought))
	_, _ = h.Write([]byte(s.bought))
	_, _ = h.Write([]byte(s.orders))
	return h.Sum64()
}

func describeOperation(input, output any) string {
	return describeLinOp(input.(linInput), output.(linOutput))
}

func describeState(state any) string {
	s := state.(linState)
	if !s.exists {
		return "no product yet"
	}
	if s.reserved != 0 {
		return fmt.Sprintf("stock %d, reserved %d, sold %d", s.stock, s.reserved, s.sold)
	}
	return fmt.Sprintf("stock %d, sold %d", s.stock, s.sold)
}

// describeLinOp is an operation in a few words: "purchase by u7 -> 201",
// "read -> stock 3, sold 7", "restock to 10 -> no answer", "pay by u7 ->
// 409 order_expired", "expire 3 orders".
func describeLinOp(in linInput, out linOutput) string {
	var b strings.Builder
	switch in.kind {
	case OpPurchase, OpPay, OpCancel:
		fmt.Fprintf(&b, "%s by %s", in.kind, in.user)
	case OpRestock:
		fmt.Fprintf(&b, "restock to %d", in.set)
	case OpExpire:
		fmt.Fprintf(&b, "expire %d order(s)", in.units)
		return b.String()
	default:
		b.WriteString(string(in.kind))
	}
	switch {
	case out.ambiguous:
		b.WriteString(" -> no answer")
	case in.kind == OpPurchase, in.kind == OpPay, in.kind == OpCancel:
		b.WriteString(" -> " + out.outcome)
	case out.reserved != 0:
		fmt.Fprintf(&b, " -> stock %d, reserved %d, sold %d", out.stock, out.reserved, out.sold)
	default:
		fmt.Fprintf(&b, " -> stock %d, sold %d", out.stock, out.sold)
	}
	return b.String()
}

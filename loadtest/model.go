package loadtest

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The sequential specification of the API that the linearizability check
// holds every history to (github.com/anishathalye/porcupine). One product
// is one partition: operations on different products never interact, so
// each product's operations are checked on their own.
//
// The state of a product is its stock, its sold count and the set of users
// who hold an order for it. The operations and what the specification says
// they answer:
//
//   - create (the set-up's POST, or its read of an existing product): the
//     product comes to exist with the state answered.
//   - read (GET /api/v1/products/:id): exactly the state's stock and sold.
//   - purchase(user), by the service's rules in their order: 409
//     already_purchased when the user holds an order (checked first, so also
//     when sold out); else 409 sold_out when the stock is 0 or less; else
//     201, and the stock goes down by one, sold up by one, and the user
//     holds an order.
//   - restock(n) (PUT /api/v1/products/:id/stock): the stock becomes n, and
//     the answer is the state it set: stock n, sold unchanged.
//
// An ambiguous operation (no answer, or a 5xx other than busy) may or may
// not have taken effect. It stays open to the end of the history, and the
// specification applies its effect, whatever it answered: a purchase
// sells if the rules allow, a restock sets the stock. Linearized where it
// took effect, that is exactly what happened; if it never took effect, it
// is linearized after every other operation, where its effect is seen by
// nobody. So one deterministic step covers both cases. Most ambiguous
// purchases are settled before the check by the orders listed after the
// sale (see settle): left out if they made no order, or held to a 201 that
// landed before the orders were listed if they did.
//
// Who bought is tracked only for users with two or more purchases in the
// product's history (the repeat buyers): a user who tries once is never
// asked about again, so leaving them out changes no answer, and it keeps
// the states that the checker compares small. The users of a run are new
// (the run's prefix), so nobody holds an order at the start.

// linInput is what an operation asked for.
type linInput struct {
	kind    OpKind
	product int64
	user    string // purchase
	bit     int    // purchase: the user's index among the repeat buyers, -1 if not one
	set     int64  // restock: the stock set
	// relaxed: the search for the smallest anomaly no longer holds the
	// operation to its answer; it may or may not have taken effect (see
	// linRelaxedModel).
	relaxed bool
}

// linOutput is what it answered.
type linOutput struct {
	ambiguous bool   // may or may not have taken effect; the answer is unknown
	outcome   string // purchase: outCreated, outSoldOut or outAlreadyPurchased
	stock     int64  // create, read, restock: the product answered
	sold      int64
}

// Purchase outcomes in the model.
const (
	outCreated          = "201"
	outSoldOut          = "409 " + codeSoldOut
	outAlreadyPurchased = "409 " + codeAlreadyPurchased
)

// linState is one product's state.
type linState struct {
	exists      bool
	stock, sold int64
	bought      string // bit set over the repeat buyers: who holds an order
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

// linStep is the specification: whether an operation with input in could
// have answered out in state s, and the state after it.
func linStep(s linState, in linInput, out linOutput) (bool, linState) {
	switch in.kind {
	case OpCreate:
		if s.exists || out.ambiguous {
			return false, s
		}
		return true, linState{exists: true, stock: out.stock, sold: out.sold}
	case OpRead:
		if !s.exists {
			// The first look at a product that existed before the run.
			return !out.ambiguous, linState{exists: true, stock: out.stock, sold: out.sold}
		}
		return !out.ambiguous && out.stock == s.stock && out.sold == s.sold, s
	case OpPurchase:
		if !s.exists {
			return false, s
		}
		var want string
		next := s
		switch {
		case s.has(in.bit):
			want = outAlreadyPurchased
		case s.stock <= 0:
			want = outSoldOut
		default:
			want = outCreated
			next.stock--
			next.sold++
			next.bought = s.with(in.bit)
		}
		return out.ambiguous || out.outcome == want, next
	case OpRestock:
		if !s.exists {
			return false, s
		}
		next := s
		next.stock = in.set
		return out.ambiguous || (out.stock == in.set && out.sold == s.sold), next
	}
	return false, s
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
	fmt.Fprintf(h, "%t/%d/%d/", s.exists, s.stock, s.sold)
	_, _ = h.Write([]byte(s.bought))
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
	return fmt.Sprintf("stock %d, sold %d", s.stock, s.sold)
}

// describeLinOp is an operation in a few words: "purchase by u7 -> 201",
// "read -> stock 3, sold 7", "restock to 10 -> no answer".
func describeLinOp(in linInput, out linOutput) string {
	var b strings.Builder
	switch in.kind {
	case OpPurchase:
		fmt.Fprintf(&b, "purchase by %s", in.user)
	case OpRestock:
		fmt.Fprintf(&b, "restock to %d", in.set)
	default:
		b.WriteString(string(in.kind))
	}
	switch {
	case out.ambiguous:
		b.WriteString(" -> no answer")
	case in.kind == OpPurchase:
		b.WriteString(" -> " + out.outcome)
	default:
		fmt.Fprintf(&b, " -> stock %d, sold %d", out.stock, out.sold)
	}
	return b.String()
}

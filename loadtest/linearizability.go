package loadtest

import (
	"cmp"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// LinVerdict is the answer of the linearizability check.
type LinVerdict string

// Verdicts. Unknown is not a pass: the check ran out of time, or the
// history was not kept whole, and nothing was shown either way.
const (
	LinNotChecked LinVerdict = ""
	LinYes        LinVerdict = "yes"
	LinNo         LinVerdict = "NO"
	LinUnknown    LinVerdict = "unknown"
)

// DefaultCheckTimeout is how long the linearizability check may search
// before it answers unknown. Finding the smallest anomaly of a violation
// gets as long again, and its visualization at most visualizeTimeout.
const DefaultCheckTimeout = 10 * time.Second

// Linearizability is what the check of a run's history found.
type Linearizability struct {
	Verdict LinVerdict
	// Product is the product whose history is not linearizable (NO only).
	Product int64
	// Anomaly is the smallest violation found, in one sentence: which
	// operations, on which replica, at which times (NO only).
	Anomaly string
	// Detail says why the verdict is unknown, or what was checked.
	Detail string
	// Operations counts the operations held to the model, NoOps those left
	// out because they certainly changed nothing (or nothing that any
	// operation saw), Ambiguous those left open to the end of the history,
	// and Settled the ambiguous purchases that the orders after the sale
	// show took effect.
	Operations, NoOps, Ambiguous, Settled int
	// Elapsed is how long the check took (the verdict; not the search for
	// the smallest anomaly nor the visualization).
	Elapsed time.Duration
	// Visualization is the file with porcupine's HTML visualization of the
	// failing product's history, written on a violation when a path was
	// given.
	Visualization string
}

// Line is the report's line: "linearizable: yes (...)", "linearizable: NO
// (product P: ...)", "linearizable: unknown (...)".
func (l Linearizability) Line() string {
	switch l.Verdict {
	case LinNotChecked:
		return "linearizable: not checked"
	case LinNo:
		return fmt.Sprintf("linearizable: NO (product %d: %s)", l.Product, l.Anomaly)
	}
	return fmt.Sprintf("linearizable: %s (%s)", l.Verdict, l.Detail)
}

// CheckOptions configure CheckHistory.
type CheckOptions struct {
	// Timeout bounds the search for a verdict (0 means
	// DefaultCheckTimeout), and again the search for the smallest anomaly.
	Timeout time.Duration
	// Visualization, when set, is the file that receives porcupine's HTML
	// visualization on a violation.
	Visualization string
	// Incomplete, when positive, is the number of operations the history
	// lost past its bound: the verdict is then unknown.
	Incomplete int
}

// CheckHistory checks whether ops is linearizable against the model of the
// API (see model.go), product by product. It is pure apart from writing
// the visualization, so hand-written histories test every verdict.
func CheckHistory(ops []Op, opts CheckOptions) Linearizability {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultCheckTimeout
	}
	h := newLinHistory(ops)
	res := Linearizability{Operations: h.definite + h.settled, NoOps: h.noOps, Ambiguous: h.ambiguous, Settled: h.settled}
	if opts.Incomplete > 0 {
		res.Verdict = LinUnknown
		res.Detail = fmt.Sprintf("the history kept %d operations and lost %d past its bound: a history with operations missing cannot be judged", len(ops), opts.Incomplete)
		return res
	}
	start := time.Now()
	counts := func() string {
		settled := ""
		if h.settled > 0 {
			settled = fmt.Sprintf(" (%d with no answer but an order after the sale)", h.settled)
		}
		if h.expiries > 0 {
			settled += fmt.Sprintf(" (%d of them expiry rounds rebuilt from the orders listed)", h.expiries)
		}
		return fmt.Sprintf("%d operations of %d product(s) checked%s, %d no-ops left out, %d ambiguous left open; in %v",
			h.definite+h.settled, len(h.products), settled, h.noOps, h.ambiguous, round(res.Elapsed))
	}
	for _, p := range h.products {
		if a := p.quickAnomaly(); a != "" {
			res.Elapsed = time.Since(start)
			res.Verdict, res.Detail, res.Product, res.Anomaly = LinNo, counts(), p.id, a
			res.visualize(p, opts)
			return res
		}
	}
	verdict := porcupine.CheckOperationsTimeout(linModel, h.all(), opts.Timeout)
	res.Elapsed = time.Since(start)
	switch verdict {
	case porcupine.Ok:
		res.Verdict, res.Detail = LinYes, counts()
		return res
	case porcupine.Unknown:
		res.Verdict = LinUnknown
		res.Detail = fmt.Sprintf("the check ran out of its %v: %s", opts.Timeout, counts())
		return res
	}

	res.Verdict, res.Detail = LinNo, counts()
	deadline := time.Now().Add(opts.Timeout)
	p := h.failing(deadline)
	res.Product = p.id
	res.Anomaly = p.smallestAnomaly(deadline)
	res.visualize(p, opts)
	return res
}

// visualizeTimeout bounds the search that porcupine's visualization
// replays; past it, the visualization shows the longest linearizable
// prefixes found so far.
const visualizeTimeout = 2 * time.Second

// visualize writes porcupine's visualization of p, if a file was asked for.
func (l *Linearizability) visualize(p *linProduct, opts CheckOptions) {
	if opts.Visualization == "" {
		return
	}
	if err := p.visualize(opts.Visualization, min(opts.Timeout, visualizeTimeout)); err != nil {
		l.Anomaly += fmt.Sprintf(" (the visualization could not be written: %v)", err)
		return
	}
	l.Visualization = opts.Visualization
}

// linHistory is a history made ready for porcupine, by product.
type linHistory struct {
	products                            []*linProduct
	definite, settled, noOps, ambiguous int
	expiries                            int // of the definite: expiry rounds
}

// linProduct is one product's operations, in porcupine's form, and the
// history's operations they came from (op i is ops[i]).
type linProduct struct {
	id    int64
	ops   []Op
	first int // the operation that gives the initial state: the create, or the first read
	in    []porcupine.Operation
	end   time.Duration // after every return: where ambiguous operations end
	idx   linIndex
}

// linIndex is what the model's inputs need to know about a product's
// history as a whole: which orders it tracks and who made them.
type linIndex struct {
	// reserve: the product's orders have a payment window.
	reserve bool
	// repeat numbers the repeat buyers (two purchases or more).
	repeat map[string]int
	// order gives each tracked order its index in linState.orders, by
	// orderKey.
	order map[int64]int
	// mine lists each repeat buyer's tracked orders; loose says which of
	// them may hold an order the history cannot name, with a window.
	mine  map[string][]int
	loose map[string]bool
}

// orderKey names the order op i makes (a 201, or a purchase settled with
// an order) or moves (a payment or a cancel): its id, or for a 201 whose
// answer named none, a key of its own below 0; 0 for none.
func (p *linProduct) orderKey(i int) int64 {
	op := p.ops[i]
	switch {
	case op.Order != 0:
		return op.Order
	case op.Kind == OpPurchase && op.Result == ResultOK && op.Status == http.StatusCreated:
		return -int64(i) - 1
	}
	return 0
}

// makes reports whether op i is a purchase that made an order.
func (p *linProduct) makes(i int) bool {
	op := p.ops[i]
	return op.Kind == OpPurchase && (op.Status == http.StatusCreated || op.Settled == SettledOrder || op.Result == ResultAmbiguous)
}

// index finds the tracked orders: those the history names twice or more
// (made, then paid, cancelled or expired), and those of repeat buyers.
func (p *linProduct) index() linIndex {
	x := linIndex{repeat: repeatBuyers(p.ops), order: map[int64]int{}, mine: map[string][]int{}, loose: map[string]bool{}}
	refs := map[int64]int{}
	for i, op := range p.ops {
		switch op.Kind {
		case OpPay, OpCancel, OpExpire:
			x.reserve = true
		}
		if op.Due != nil {
			x.reserve = true
		}
		if k := p.orderKey(i); k != 0 {
			refs[k]++
		}
		for _, k := range op.Orders {
			refs[k]++
		}
	}
	byCall := make([]int, len(p.ops))
	for i := range byCall {
		byCall[i] = i
	}
	slices.SortStableFunc(byCall, func(a, b int) int { return cmp.Compare(p.ops[a].Call, p.ops[b].Call) })
	track := func(k int64) {
		if _, ok := x.order[k]; !ok && k != 0 {
			x.order[k] = len(x.order)
		}
	}
	for _, i := range byCall {
		op := p.ops[i]
		k := p.orderKey(i)
		_, repeat := x.repeat[op.User]
		switch {
		case op.Kind == OpPurchase && repeat && p.makes(i) && k == 0:
			x.loose[op.User] = x.reserve
		case op.Kind == OpPurchase && repeat && k != 0:
			track(k)
			x.mine[op.User] = append(x.mine[op.User], x.order[k])
		case refs[k] > 1:
			track(k)
		}
		for _, k := range op.Orders {
			if refs[k] > 1 {
				track(k)
			}
		}
	}
	return x
}

func newLinHistory(ops []Op) *linHistory {
	h := &linHistory{}
	byID := map[int64]*linProduct{}
	var end time.Duration
	for _, op := range ops {
		end = max(end, op.Return, op.Call)
	}
	end++
	for _, op := range ops {
		switch {
		case op.Result == ResultNoOp, op.Result == ResultAmbiguous && op.Settled == SettledNoOrder:
			h.noOps++
			continue
		case op.Result == ResultAmbiguous && op.Settled == SettledOrder:
			h.settled++
		case op.Result == ResultAmbiguous:
			h.ambiguous++
		default:
			h.definite++
			if op.Kind == OpExpire {
				h.expiries++
			}
		}
		p := byID[op.Product]
		if p == nil {
			p = &linProduct{id: op.Product, end: end}
			byID[op.Product] = p
			h.products = append(h.products, p)
		}
		p.ops = append(p.ops, op)
	}
	for _, p := range h.products {
		p.first = slices.IndexFunc(p.ops, func(op Op) bool { return op.Kind == OpCreate })
		if p.first < 0 {
			// An existing product: its first read, which no other
			// operation can precede.
			for i, op := range p.ops {
				if op.Kind == OpRead && (p.first < 0 || op.Call < p.ops[p.first].Call) {
					p.first = i
				}
			}
		}
		p.idx = p.index()
		p.in = p.operations(nil)
	}
	return h
}

func (h *linHistory) all() []porcupine.Operation {
	var all []porcupine.Operation
	for _, p := range h.products {
		all = append(all, p.in...)
	}
	return all
}

// failing returns the first product whose history alone is not
// linearizable, or, if none is shown to be before the deadline, the first.
func (h *linHistory) failing(deadline time.Time) *linProduct {
	if len(h.products) == 1 {
		return h.products[0]
	}
	for _, p := range h.products {
		if p.check(linModel, p.in, deadline) == porcupine.Illegal {
			return p
		}
	}
	return h.products[0]
}

// How the search for the smallest anomaly treats an operation.
type relax uint8

const (
	keep    relax = iota // held to its answer
	relaxed              // may or may not have taken effect, within its interval
	dropped              // left out: a read or a 409 relaxed (it changed nothing), or an operation after a cut
)

// operations converts p's operations to porcupine's, treated as modes
// says (nil: every one kept). Ambiguous operations end after every other.
// Client ids only lay the visualization out: each operation goes to the
// first row whose last operation has returned.
func (p *linProduct) operations(modes []relax) []porcupine.Operation {
	order := make([]int, len(p.ops))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(p.ops[a].Call, p.ops[b].Call) })
	var rows []time.Duration // when each row is free again
	out := make([]porcupine.Operation, 0, len(p.ops))
	for _, i := range order {
		op := p.ops[i]
		mode := keep
		if modes != nil {
			mode = modes[i]
		}
		if mode == dropped || (mode == relaxed && !p.changes(i)) {
			continue
		}
		in, o := p.input(i), linOutput{}
		ret := max(op.Return, op.Call) // an expiry closed before it was due: quickAnomaly says so
		switch {
		case op.Result == ResultAmbiguous && op.Settled == SettledOrder:
			ret = op.SettledBy // its order was listed by then
		case op.Result == ResultAmbiguous:
			ret = p.end // it may have taken effect after its client gave up
		}
		switch {
		case mode == relaxed:
			in.relaxed = true
		case op.Result == ResultAmbiguous && op.Settled == SettledOrder:
			o.outcome = outCreated // a sale, some time after its call
		case op.Result == ResultAmbiguous:
			o.ambiguous = true
		case op.Kind == OpPurchase && op.Status == http.StatusCreated:
			o.outcome = outCreated
		case op.Kind == OpPay || op.Kind == OpCancel:
			o.outcome = outOK
			if op.Status != http.StatusOK {
				o.outcome = fmt.Sprintf("%d %s", op.Status, op.Code)
			}
		case op.Kind == OpPurchase:
			o.outcome = fmt.Sprintf("%d %s", op.Status, op.Code)
		default:
			o.stock, o.reserved, o.sold = deref(op.Stock), deref(op.Reserved), deref(op.Sold)
		}
		client := slices.IndexFunc(rows, func(free time.Duration) bool { return free < op.Call })
		if client < 0 {
			client = len(rows)
			rows = append(rows, 0)
		}
		rows[client] = ret
		out = append(out, porcupine.Operation{
			ClientId: client, Input: in, Output: o,
			Call: int64(op.Call), Return: int64(ret), Metadata: op.where(),
		})
	}
	return out
}

// dueSlack is how far past its order's due time a payment or a cancel
// must have been called to be surely late: the API writes expires_at in
// microseconds, truncated, and the window ends up to a microsecond after
// the time written. A millisecond is ample.
const dueSlack = time.Millisecond

// input is op i as the model's input.
func (p *linProduct) input(i int) linInput {
	op := p.ops[i]
	in := linInput{kind: op.Kind, product: op.Product, user: op.User, bit: -1, order: -1, reserve: p.idx.reserve}
	if k, ok := p.idx.order[p.orderKey(i)]; ok {
		in.order = k
	}
	if op.Set != nil {
		in.set = *op.Set
	}
	switch op.Kind {
	case OpPurchase:
		if b, ok := p.idx.repeat[op.User]; ok {
			in.bit, in.mine, in.loose = b, p.idx.mine[op.User], p.idx.loose[op.User]
		}
	case OpPay, OpCancel:
		if op.Due != nil {
			in.late = op.Call > *op.Due+dueSlack
			in.early = op.Return < *op.Due
		}
	case OpExpire:
		in.units = int64(len(op.Orders))
		for _, k := range op.Orders {
			if j, ok := p.idx.order[k]; ok {
				in.moved = append(in.moved, j)
			}
		}
	}
	return in
}

// check runs porcupine on ops of this product until deadline.
func (p *linProduct) check(model porcupine.Model, ops []porcupine.Operation, deadline time.Time) porcupine.CheckResult {
	left := time.Until(deadline)
	if left <= 0 {
		return porcupine.Unknown
	}
	return porcupine.CheckOperationsTimeout(model, ops, left)
}

// smallestAnomaly looks for the smallest set of operations whose answers
// no order explains, and says it in one sentence. Two steps, each sound
// (what it ends with is still a violation, so never a false alarm):
//
//  1. The shortest failing prefix: the history cut at the return of a
//     definite operation, with the operations still running at the cut
//     relaxed and the later ones left out. If a cut fails, the whole
//     history fails, and every later cut too, so a binary search over the
//     cuts finds the first failing one.
//  2. Within it, the other definite operations are relaxed, in halves,
//     then quarters, and so on, as long as the history still fails:
//     first the 201s and restocks, which may or may not have taken effect
//     (linRelaxedModel), then the reads and 409s, which are left out
//     (they changed nothing). Relaxing only allows more orders, so what
//     still fails is a violation of the operations left definite.
//
// Each search is given at most tryTimeout, and one that runs out counts as
// not failing: the violation found may then be larger than the smallest,
// never wrong. Both steps stop at the deadline with the smallest
// violation shown so far.
func (p *linProduct) smallestAnomaly(deadline time.Time) string {
	defs := p.definiteByReturn()
	if len(defs) == 0 {
		return "no operation has a definite answer, yet none of the orders fits"
	}
	fails := func(modes []relax) bool {
		d := time.Now().Add(tryTimeout)
		if deadline.Before(d) {
			d = deadline
		}
		return p.check(linRelaxedModel, p.operations(modes), d) == porcupine.Illegal
	}
	// Step 1. hi is a failing cut: the last definite return leaves out
	// only ambiguous operations that start after it, which end after
	// everything and so can take effect where nobody sees it.
	lo, hi := 0, len(defs)-1
	for lo < hi && time.Now().Before(deadline) {
		mid := (lo + hi) / 2
		if fails(p.cut(p.ops[defs[mid]].Return)) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	modes := p.cut(p.ops[defs[hi]].Return)

	// Step 2: what changed the state first, while the reads still pin it
	// down (which keeps the searches short), then what only observed it.
	for _, changes := range []bool{true, false} {
		var cands []int
		for _, i := range defs[:hi] {
			if modes[i] == keep && i != p.first && p.changes(i) == changes {
				cands = append(cands, i)
			}
		}
		for chunk := max(1, len(cands)/2); ; chunk /= 2 {
			cands = slices.DeleteFunc(cands, func(i int) bool { return modes[i] != keep })
			if len(cands) == 0 {
				break
			}
			for s := 0; s < len(cands) && time.Now().Before(deadline); s += chunk {
				try := slices.Clone(modes)
				for _, i := range cands[s:min(s+chunk, len(cands))] {
					try[i] = relaxed
				}
				if fails(try) {
					modes = try
				}
			}
			if chunk == 1 || !time.Now().Before(deadline) {
				break
			}
		}
	}
	return p.sentence(modes)
}

// tryTimeout bounds each search of smallestAnomaly: relaxed purchases may
// each have taken effect or not, and showing that none of those
// combinations fits is a search over them all.
const tryTimeout = 500 * time.Millisecond

// changes reports whether operation i changed the state: a 201, a 200
// payment or cancel, a restock, an expiry, or an ambiguous one.
func (p *linProduct) changes(i int) bool {
	op := p.ops[i]
	switch op.Kind {
	case OpRestock, OpExpire:
		return true
	case OpPurchase:
		return op.Result == ResultAmbiguous || op.Status == http.StatusCreated
	case OpPay, OpCancel:
		return op.Result == ResultAmbiguous || op.Status == http.StatusOK
	}
	return false
}

// definiteByReturn returns the indices of p's definite operations by
// return time.
func (p *linProduct) definiteByReturn() []int {
	var defs []int
	for i, op := range p.ops {
		if op.Result == ResultOK {
			defs = append(defs, i)
		}
	}
	slices.SortStableFunc(defs, func(a, b int) int { return cmp.Compare(p.ops[a].Return, p.ops[b].Return) })
	return defs
}

// cut is the history cut at t: operations that returned by t are kept,
// those still running at t are relaxed (they may have taken effect before
// t or not), and those that started after t are left out (they cannot
// have taken effect before t).
func (p *linProduct) cut(t time.Duration) []relax {
	modes := make([]relax, len(p.ops))
	for i, op := range p.ops {
		switch {
		case i == p.first || op.Return <= t:
			modes[i] = keep
		case op.Call <= t:
			modes[i] = relaxed
		default:
			modes[i] = dropped
		}
	}
	return modes
}

// sentence describes the definite operations of a failing relaxation.
func (p *linProduct) sentence(modes []relax) string {
	var witness []int
	for i, op := range p.ops {
		if modes[i] == keep && op.Result == ResultOK && i != p.first {
			witness = append(witness, i)
		}
	}
	slices.SortStableFunc(witness, func(a, b int) int { return cmp.Compare(p.ops[a].Call, p.ops[b].Call) })
	const most = 6
	var parts []string
	for n, i := range witness {
		if n == most {
			parts = append(parts, fmt.Sprintf("and %d more", len(witness)-most))
			break
		}
		parts = append(parts, p.ops[i].describe())
	}
	var start string
	if p.first >= 0 {
		start = "starting from " + p.ops[p.first].state() + ", "
	}
	if len(witness) == 1 {
		return fmt.Sprintf("%sno order explains this answer, even with every other request's answer lost: %s", start, parts[0])
	}
	return fmt.Sprintf("%sno order of these %d operations explains their answers, even with every other request's answer lost: %s",
		start, len(witness), strings.Join(parts, "; "))
}

// visualize writes porcupine's HTML visualization of p's whole history.
func (p *linProduct) visualize(path string, timeout time.Duration) error {
	_, info := porcupine.CheckOperationsVerbose(linModel, p.in, timeout)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := porcupine.Visualize(linModel, info, f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// repeatBuyers numbers the users with two or more purchases in ops.
func repeatBuyers(ops []Op) map[string]int {
	n := map[string]int{}
	for _, op := range ops {
		if op.Kind == OpPurchase {
			n[op.User]++
		}
	}
	bits := map[string]int{}
	users := make([]string, 0, len(n))
	for u, c := range n {
		if c > 1 {
			users = append(users, u)
		}
	}
	slices.Sort(users)
	for i, u := range users {
		bits[u] = i
	}
	return bits
}

// describe is the operation for the anomaly's sentence.
func (op Op) describe() string {
	var what string
	switch op.Kind {
	case OpPurchase, OpPay, OpCancel:
		what = fmt.Sprintf("%s by %s", op.Kind, op.User)
		if op.Kind != OpPurchase {
			what = fmt.Sprintf("%s of order %d by %s", op.Kind, op.Order, op.User)
		}
		what += fmt.Sprintf(" -> %d", op.Status)
		if op.Code != "" {
			what += " " + op.Code
		}
		if op.Kind == OpPurchase && op.Order != 0 {
			what += fmt.Sprintf(" order %d", op.Order)
		}
	case OpRestock:
		what = fmt.Sprintf("restock to %d -> %s", deref(op.Set), op.state())
	case OpExpire:
		what = fmt.Sprintf("expiry of order(s) %s", idList(op.Orders))
	default:
		what = fmt.Sprintf("%s -> %s", op.Kind, op.state())
	}
	return what + " (" + op.where() + ")"
}

// state is the product in op's answer: "stock 3, sold 7", or with a
// reserved count, "stock 3, reserved 2, sold 5".
func (op Op) state() string {
	if r := deref(op.Reserved); r != 0 {
		return fmt.Sprintf("stock %d, reserved %d, sold %d", deref(op.Stock), r, deref(op.Sold))
	}
	return fmt.Sprintf("stock %d, sold %d", deref(op.Stock), deref(op.Sold))
}

// idList writes ids "1, 2, 3", or the first ones and how many more.
func idList(ids []int64) string {
	const most = 5
	var parts []string
	for i, id := range ids {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d more", len(ids)-most))
			break
		}
		parts = append(parts, fmt.Sprint(id))
	}
	return strings.Join(parts, ", ")
}

// where is the replica and the interval of op: "127.0.0.1:8080,
// 0.512-0.530s"; for an expiry, "expiry, due 0.512s, closed by 0.530s".
func (op Op) where() string {
	if op.Kind == OpExpire {
		return fmt.Sprintf("expiry, due %.3fs, closed by %.3fs", op.Call.Seconds(), op.Return.Seconds())
	}
	host := strings.TrimPrefix(strings.TrimPrefix(op.Target, "http://"), "https://")
	if host == "" {
		host = "?"
	}
	return fmt.Sprintf("%s, %.3f-%.3fs", host, op.Call.Seconds(), op.Return.Seconds())
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

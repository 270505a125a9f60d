package loadtest

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Hand-written histories: times in milliseconds from the start, product 1
// unless said otherwise, replicas "a" and "b".

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func hCreate(product, stock int64) Op {
	return Op{Kind: OpCreate, Product: product, Target: "http://a", Set: ptr(stock), Call: 0, Return: ms(1),
		Status: http.StatusCreated, Stock: ptr(stock), Sold: ptr[int64](0), Result: ResultOK}
}

func hBuy(user string, call, ret int, status int, code string) Op {
	return Op{Kind: OpPurchase, Product: 1, Target: "http://a", User: user, Call: ms(call), Return: ms(ret),
		Status: status, Code: code, Result: ResultOK}
}

func hRead(call, ret int, stock, sold int64) Op {
	return Op{Kind: OpRead, Product: 1, Target: "http://b", Call: ms(call), Return: ms(ret),
		Status: http.StatusOK, Stock: ptr(stock), Sold: ptr(sold), Result: ResultOK}
}

func hRestock(call, ret int, set, sold int64) Op {
	return Op{Kind: OpRestock, Product: 1, Target: "http://b", Set: ptr(set), Call: ms(call), Return: ms(ret),
		Status: http.StatusOK, Stock: ptr(set), Sold: ptr(sold), Result: ResultOK}
}

// lost is op without its answer: a timeout, so it may or may not have
// taken effect.
func lost(op Op) Op {
	op.Status, op.Code, op.Stock, op.Sold = 0, "", nil, nil
	op.Error, op.Result = "context deadline exceeded", ResultAmbiguous
	return op
}

func busy(op Op) Op {
	op.Status, op.Code, op.Stock, op.Sold, op.Result = http.StatusServiceUnavailable, codeBusy, nil, nil, ResultNoOp
	return op
}

func onProduct(p int64, op Op) Op {
	op.Product = p
	return op
}

const (
	c201  = http.StatusCreated
	c409  = http.StatusConflict
	sold  = codeSoldOut
	twice = codeAlreadyPurchased
)

func TestCheckHistoryVerdicts(t *testing.T) {
	cases := []struct {
		name string
		ops  []Op
		want LinVerdict
		// anomaly must mention each of these (NO only).
		anomaly []string
	}{
		{
			name: "linearizable: concurrent buyers, repeats, reads, restocks, two products",
			ops: []Op{
				hCreate(1, 2),
				hBuy("u1", 2, 10, c201, ""), hBuy("u2", 3, 9, c201, ""), // concurrent, both sell
				hRead(4, 8, 1, 1), // sees one of them
				hBuy("u1", 11, 12, c409, twice),
				hBuy("u3", 13, 14, c409, sold),
				hBuy("u2", 15, 16, c409, twice), // already purchased wins over sold out
				hRestock(17, 18, 1, 2),
				hBuy("u3", 19, 25, c201, ""), hBuy("u4", 20, 24, c409, sold), // u3 linearized first
				busy(hBuy("u5", 21, 22, 0, "")),
				hRestock(26, 27, 0, 3),
				hRead(28, 29, 0, 3),
				onProduct(2, hCreate(2, 1)),
				onProduct(2, hBuy("v1", 2, 3, c201, "")),
				onProduct(2, hRead(4, 5, 0, 1)),
			},
			want: LinYes,
		},
		{
			// Two buyers read stock 10 and both wrote back 9: the stock
			// lost an update, though sold counts both.
			name: "lost update",
			ops: []Op{
				hCreate(1, 10),
				hBuy("u1", 2, 10, c201, ""), hBuy("u2", 3, 9, c201, ""),
				hRead(11, 12, 9, 2),
			},
			want:    LinNO(),
			anomaly: []string{"starting from stock 10, sold 0", "read -> stock 9, sold 2 (b, 0.011-0.012s)"},
		},
		{
			// The restock's answer came back before the purchase began:
			// a sold-out answer after it is stale.
			name: "stale sold-out after a restock",
			ops: []Op{
				hCreate(1, 1),
				hBuy("u1", 2, 3, c201, ""),
				hBuy("u2", 4, 5, c409, sold),
				hRestock(6, 7, 5, 1),
				hBuy("u3", 8, 9, c409, sold),
			},
			want:    LinNO(),
			anomaly: []string{"purchase by u3 -> 409 sold_out", "restock to 5 -> stock 5, sold 1"},
		},
		{
			// The purchase's answer was lost, yet a later read shows the
			// sale: it took effect, which an ambiguous purchase may.
			name: "ambiguous purchase that took effect",
			ops: []Op{
				hCreate(1, 10),
				lost(hBuy("u1", 2, 3, 0, "")),
				hRead(5, 6, 9, 1),
				hBuy("u1", 7, 8, c409, twice),
			},
			want: LinYes,
		},
		{
			name: "ambiguous purchase that did not take effect",
			ops: []Op{
				hCreate(1, 10),
				lost(hBuy("u1", 2, 3, 0, "")),
				hRead(5, 6, 10, 0),
			},
			want: LinYes,
		},
		{
			// The control of the case above: a busy answer wrote nothing,
			// so nothing explains the read.
			name: "busy purchase seen to take effect",
			ops: []Op{
				hCreate(1, 10),
				busy(hBuy("u1", 2, 3, 0, "")),
				hRead(5, 6, 9, 1),
			},
			want:    LinNO(),
			anomaly: []string{"read -> stock 9, sold 1"},
		},
		{
			// A restock answered with the purchases that ran after it.
			name: "restock answer read after the lock",
			ops: []Op{
				hCreate(1, 10),
				func() Op { op := hRestock(2, 10, 5, 0); op.Stock, op.Sold = ptr[int64](4), ptr[int64](1); return op }(),
				hBuy("u1", 3, 4, c201, ""),
				hRead(11, 12, 4, 1),
			},
			want:    LinNO(),
			anomaly: []string{"restock to 5 -> stock 4, sold 1"},
		},
		{
			name: "already purchased is checked before sold out",
			ops: []Op{
				hCreate(1, 1),
				hBuy("u1", 2, 3, c201, ""),
				hBuy("u1", 4, 5, c409, sold),
			},
			want:    LinNO(),
			anomaly: []string{"purchase by u1 -> 409 sold_out"},
		},
		{
			name: "a second 201 for one user",
			ops: []Op{
				hCreate(1, 5),
				hBuy("u1", 2, 3, c201, ""),
				hBuy("u1", 4, 5, c201, ""),
			},
			want: LinNO(),
		},
		{
			name: "a violation on the second product only",
			ops: []Op{
				hCreate(1, 1),
				hBuy("u1", 2, 3, c201, ""),
				onProduct(2, hCreate(2, 1)),
				onProduct(2, hBuy("v1", 2, 3, c201, "")),
				onProduct(2, hBuy("v2", 4, 5, c201, "")),
			},
			want: LinNO(),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckHistory(tc.ops, CheckOptions{Timeout: 10 * time.Second})
			if got.Verdict != tc.want {
				t.Fatalf("got %s, want %s", got.Line(), tc.want)
			}
			// The quick checks only save time: porcupine's search over the
			// model alone gives the same verdict.
			if ok := porcupine.CheckOperations(linModel, newLinHistory(tc.ops).all()); ok != (tc.want == LinYes) {
				t.Errorf("the model alone: got linearizable %v, want %v", ok, tc.want == LinYes)
			}
			for _, s := range tc.anomaly {
				if !strings.Contains(got.Anomaly, s) {
					t.Errorf("anomaly %q lacks %q", got.Anomaly, s)
				}
			}
			t.Log(got.Line())
		})
	}
}

// LinNO is LinNo, as a function so that the table reads "want: LinNO()"
// apart from LinYes at a glance.
func LinNO() LinVerdict { return LinNo }

// The anomaly is the smallest found, by porcupine's search rather than
// the quick checks: of a long linearizable history with one stale read in
// the middle (stock + sold still adds up), only the operations that show
// it: the read before, one purchase after it, and the stale read.
func TestCheckHistoryFindsSmallAnomaly(t *testing.T) {
	ops := []Op{hCreate(1, 1000)}
	stock, soldN := int64(1000), int64(0)
	at := 2
	for i := range 100 {
		ops = append(ops, hBuy(fmt.Sprintf("u%d", i), at, at+3, c201, ""), hBuy(fmt.Sprintf("w%d", i), at+1, at+4, c201, ""))
		stock, soldN = stock-2, soldN+2
		at += 5
		if i == 50 {
			ops = append(ops, hRead(at, at+1, stock+2, soldN-2)) // the state before the pair
		} else {
			ops = append(ops, hRead(at, at+1, stock, soldN))
		}
		at += 2
	}
	viz := filepath.Join(t.TempDir(), "v.html")
	got := CheckHistory(ops, CheckOptions{Timeout: 10 * time.Second, Visualization: viz})
	if got.Verdict != LinNo || got.Visualization != viz {
		t.Fatalf("got %s, visualization %q; want NO and %s", got.Line(), got.Visualization, viz)
	}
	for _, want := range []string{"read -> stock 900, sold 100 (b, 0.350-0.351s)",
		"50 -> 201 (a, 0.35", "read -> stock 900, sold 100 (b, 0.357-0.358s)"} {
		if !strings.Contains(got.Anomaly, want) {
			t.Errorf("anomaly %q lacks %q", got.Anomaly, want)
		}
	}
	// Three operations suffice. A search that runs out of its time on a
	// loaded machine keeps an operation it could have relaxed: a few more
	// are tolerated, the 300 of the history are not.
	n := 0
	if m := regexp.MustCompile(`these (\d+) operations`).FindStringSubmatch(got.Anomaly); m != nil {
		n, _ = strconv.Atoi(m[1])
	}
	if n < 3 || n > 6 {
		t.Errorf("anomaly %q: want 3 to 6 operations", got.Anomaly)
	}
	html, err := os.ReadFile(viz)
	if err != nil || !bytes.Contains(html, []byte("purchase by w50")) {
		t.Errorf("visualization %s: err %v, %d bytes, want porcupine's HTML with the operations", viz, err, len(html))
	}
}

// Unknown is not a pass: a history that lost operations past its bound,
// and a search that runs out of time.
func TestCheckHistoryUnknown(t *testing.T) {
	ops := []Op{hCreate(1, 10), hBuy("u1", 2, 3, c201, "")}
	got := CheckHistory(ops, CheckOptions{Incomplete: 5})
	if got.Verdict != LinUnknown || !strings.Contains(got.Detail, "lost 5") {
		t.Errorf("incomplete history: got %s, want unknown", got.Line())
	}

	// 3000 buyers at once: more than a millisecond's search.
	ops = []Op{hCreate(1, 1500)}
	for i := range 3000 {
		code, status := "", c201
		if i%2 == 1 {
			code, status = sold, c409
		}
		ops = append(ops, hBuy(fmt.Sprintf("u%d", i), 2, 1000, status, code))
	}
	got = CheckHistory(ops, CheckOptions{Timeout: time.Millisecond})
	if got.Verdict != LinUnknown || !strings.Contains(got.Detail, "ran out of its 1ms") {
		t.Errorf("a search cut short: got %s, want unknown", got.Line())
	}
	rep := Report{Linearizability: got}
	if rep.OK() {
		t.Errorf("a report with linearizability unknown: got OK, want not a pass (%s)", rep.Verdict())
	}
}

// The history file holds one JSON object per operation and reads back the
// same.
func TestHistoryFileRoundTrip(t *testing.T) {
	ops := []Op{hCreate(1, 10), lost(hBuy("u1", 2, 3, 0, "")), hRead(5, 6, 9, 1), hRestock(7, 8, 0, 1), busy(hBuy("u2", 9, 10, 0, ""))}
	path := filepath.Join(t.TempDir(), "h.jsonl")
	if err := writeHistory(path, ops); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(raw, []byte("\n")); n != len(ops) {
		t.Errorf("got %d lines, want %d", n, len(ops))
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	back, err := ReadHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, ops) {
		t.Errorf("read back\n%v\nwant\n%v", back, ops)
	}
	if got := CheckHistory(back, CheckOptions{}); got.Verdict != LinYes {
		t.Errorf("got %s, want yes", got.Line())
	}
}

// The orders listed after the sale settle the purchases whose answers were
// lost: a buyer with an order that no other request of theirs made bought
// with this one; a buyer without one did not.
func TestSettleAmbiguousPurchases(t *testing.T) {
	ops := []Op{
		hCreate(1, 10),
		lost(hBuy("u1", 2, 3, 0, "")), // holds an order: it took effect
		lost(hBuy("u2", 2, 3, 0, "")), // holds none
		hBuy("u3", 2, 3, c201, ""),
		lost(hBuy("u3", 4, 5, 0, "")),                                // u3's order is the 201's
		lost(hBuy("u4", 2, 3, 0, "")), lost(hBuy("u4", 4, 5, 0, "")), // one of two: cannot tell which
	}
	orders := []Order{{ProductID: 1, UserID: "u1"}, {ProductID: 1, UserID: "u3"}, {ProductID: 1, UserID: "u4"}}
	settle(ops, orders, ms(7))
	want := []string{"", SettledOrder, SettledNoOrder, "", SettledNoOrder, "", ""}
	for i, op := range ops {
		if op.Settled != want[i] {
			t.Errorf("op %d (%s by %s): settled %q, want %q", i, op.Kind, op.User, op.Settled, want[i])
		}
	}

	// u1's sale may land after a read that did not see it, but it must
	// land: a final read without it is not linearizable.
	base := []Op{hCreate(1, 10), lost(hBuy("u1", 2, 3, 0, "")), hRead(5, 6, 10, 0)}
	for _, tc := range []struct {
		final Op
		want  LinVerdict
	}{
		{hRead(8, 9, 9, 1), LinYes},
		{hRead(8, 9, 10, 0), LinNo},
	} {
		h := append(slices.Clone(base), tc.final)
		settle(h, []Order{{ProductID: 1, UserID: "u1"}}, ms(7)) // listed before the final read
		if got := CheckHistory(h, CheckOptions{}); got.Verdict != tc.want {
			t.Errorf("final read stock %d sold %d: got %s, want %s", *tc.final.Stock, *tc.final.Sold, got.Line(), tc.want)
		}
	}
	// Without an order, the lost purchase changed nothing anyone saw.
	h := append(slices.Clone(base), hRead(8, 9, 9, 1))
	settle(h, nil, ms(7))
	if got := CheckHistory(h, CheckOptions{}); got.Verdict != LinNo || got.NoOps != 1 {
		t.Errorf("a sale seen without an order: got %s with %d no-ops, want NO and 1", got.Line(), got.NoOps)
	}
}

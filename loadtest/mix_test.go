package loadtest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseMix(t *testing.T) {
	cases := []struct {
		in   string
		want Mix
		err  string
	}{
		{"", Mix{}, ""},
		{"none", Mix{}, ""},
		{"reads=10%,restocks=1/s", Mix{Reads: 0.1, Restocks: 1}, ""},
		{" reads = 0.25 , restocks = 2 ", Mix{Reads: 0.25, Restocks: 2}, ""},
		{"restocks=500ms", Mix{Restocks: 2}, ""},
		{"restocks=30/m", Mix{Restocks: 0.5}, ""},
		{"restocks=2%", Mix{RestockShare: 0.02}, ""},
		{"reads=10%,restocks=0.5%", Mix{Reads: 0.1, RestockShare: 0.005}, ""},
		{"restocks=150%", Mix{}, "0 to 100%"},
		{"restocks=x%", Mix{}, `restocks "x%"`},
		{"reads=100%", Mix{}, "up to, not including, 100%"},
		{"reads=-1%", Mix{}, "reads"},
		{"reads=many", Mix{}, "want a percentage"},
		{"restocks=1/h", Mix{}, "per second"},
		{"restocks=-1", Mix{}, "restocks"},
		{"restocks=0s", Mix{}, "positive interval"},
		{"restocks=1000/s", Mix{}, "0 to 100 a second"},
		{"writes=1", Mix{}, "unknown key"},
		{"reads", Mix{}, "key=value"},
	}
	for _, tc := range cases {
		got, err := ParseMix(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseMix(%q): got %+v, %v; want %+v", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseMix(%q): got %+v, %v; want an error mentioning %q", tc.in, got, err, tc.err)
		}
	}
	if s := (Mix{Reads: 0.1, Restocks: 2}).String(); s != "reads=10%,restocks=2/s" {
		t.Errorf("String: got %q", s)
	}
	if s := (Mix{RestockShare: 0.025}).String(); s != "restocks=2.5%" {
		t.Errorf("String: got %q", s)
	}
	if err := (Mix{Restocks: 1, RestockShare: 0.1}).validate(); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("a rate and a share: got %v, want an error", err)
	}
}

// mixedSale is a short sale with reads and restocks mixed in, its history
// written to dir. The restocks are paced by count, one per 20 answers, so
// that they come however fast the sale goes.
func mixedSale(dir string, targets ...string) Config {
	cfg := shortSale(targets...)
	cfg.Stock = 30
	cfg.Rate, cfg.Duration, cfg.MaxRequests = 0, 0, 0
	cfg.Buyers = 400 // at most 8 in flight: the mix's bound
	cfg.RepeatShare = 0.1
	cfg.Mix = Mix{Reads: 0.2, RestockShare: 0.05}
	cfg.History = filepath.Join(dir, "history.jsonl")
	return cfg
}

// A correct shop's mixed sale is linearizable, and its history file holds
// every operation: the create, the purchases, the reads, the restocks and
// the read after the sale.
func TestRunMixedSaleOnCorrectShopIsLinearizable(t *testing.T) {
	shop := newFakeShop(false)
	a, _ := shop.serve(t)
	b, _ := shop.serve(t)
	cfg := mixedSale(t.TempDir(), a, b)

	var out bytes.Buffer
	rep, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	lin := rep.Linearizability
	if !rep.OK() || lin.Verdict != LinYes {
		t.Fatalf("got %q, %s; want a pass, linearizable\n%s", rep.Verdict(), lin.Line(), out.String())
	}
	// One restock falls due per 20 answers: 20 in all, fewer when some fell
	// due while one was in flight, and never none.
	if rep.Restocks == 0 {
		t.Fatalf("fault not injected: no restock ran during the sale, want 1 to 20\n%s", out.String())
	}
	if rep.Reads != 80 || rep.Requests != 320 || rep.Restocks > 20 {
		t.Errorf("got %d reads, %d restocks, %d purchases; want 80 reads (20%% of 400), 1 to 20 restocks (one per 20 answers), 320 purchases",
			rep.Reads, rep.Restocks, rep.Requests)
	}
	for _, want := range []string{"mixed in: reads=20%,restocks=5%, at most 8 requests in flight",
		"linearizable: yes (", "history: " + cfg.History, "from the last of"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	f, err := os.Open(cfg.History)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ops, err := ReadHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[OpKind]int{}
	for _, op := range ops {
		kinds[op.Kind]++
		if op.Return < op.Call || op.Call < 0 || (op.Target != a && op.Target != b) {
			t.Errorf("operation %+v: want 0 <= call <= return and one of the targets", op)
		}
	}
	want := map[OpKind]int{OpCreate: 1, OpPurchase: rep.Requests, OpRead: rep.Reads + 1, OpRestock: rep.Restocks}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("history: got %d %s operations, want %d", kinds[k], k, n)
		}
	}
	if len(ops) != lin.Operations+lin.NoOps+lin.Ambiguous {
		t.Errorf("history of %d operations, but the check counted %d + %d + %d", len(ops), lin.Operations, lin.NoOps, lin.Ambiguous)
	}
}

// The racy shop's lost updates fail the check, which writes porcupine's
// visualization next to the history.
func TestRunMixedSaleOnRacyShopIsNotLinearizable(t *testing.T) {
	a, _ := newFakeShop(true).serve(t)
	dir := t.TempDir()
	cfg := mixedSale(dir, a)
	cfg.Mix.RestockShare = 0

	var out bytes.Buffer
	rep, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	lin := rep.Linearizability
	if rep.OK() || lin.Verdict != LinNo || lin.Product != rep.ProductID {
		t.Fatalf("got %q, %s; want the violation caught on product %d\n%s", rep.Verdict(), lin.Line(), rep.ProductID, out.String())
	}
	viz := filepath.Join(dir, "history.html")
	if lin.Visualization != viz || !strings.Contains(out.String(), "visualization of product") {
		t.Errorf("visualization: got %q, want %s named in the report\n%s", lin.Visualization, viz, out.String())
	}
	if html, err := os.ReadFile(viz); err != nil || !bytes.Contains(html, []byte("purchase by "+rep.UserPrefix)) {
		t.Errorf("visualization %s: err %v, %d bytes; want porcupine's HTML with the sale's operations", viz, err, len(html))
	}
}

// A restock that answers with the state after a later purchase breaks no
// count: the invariants all pass. The check sees the answer is not the
// state the restock set. The shop holds its first purchase until a
// restock has set the stock, so that one sale at least comes after one.
func TestRunLateRestockAnswerIsNotLinearizable(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // where the check's visualization goes
	shop := newFakeShop(false)
	shop.lateRestockAnswer = true
	shop.holdFirstPurchaseForRestock()
	a, _ := shop.serve(t)
	cfg := mixedSale(t.TempDir(), a)
	cfg.Stock = 1000 // purchases keep selling, so every restock sees one after it
	cfg.Mix.Reads = 0

	var out bytes.Buffer
	rep, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if rep.Restocks == 0 || rep.Created < 2 {
		t.Fatalf("fault not injected: %d restocks and %d purchases, want a restock with a purchase after it\n%s", rep.Restocks, rep.Created, out.String())
	}
	if rep.Oversold {
		t.Fatalf("the counts show an oversell, want them clean\n%s", out.String())
	}
	lin := rep.Linearizability
	if lin.Verdict != LinNo || !strings.Contains(lin.Anomaly, "a restock answered a state it did not set") {
		t.Errorf("got %s, want the late restock answer caught\n%s", lin.Line(), out.String())
	}
	if rep.OK() || !strings.Contains(rep.Verdict(), "NOT LINEARIZABLE") {
		t.Errorf("got verdict %q, want a failure for the anomaly the counts do not show", rep.Verdict())
	}
}

// The history kept in memory is bounded: past the bound, the check cannot
// judge and says unknown.
func TestRunHistoryPastItsBoundIsUnknown(t *testing.T) {
	a, _ := newFakeShop(false).serve(t)
	cfg := shortSale(a)
	cfg.HistoryLimit = 10
	rep, err := Run(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Linearizability.Verdict != LinUnknown || rep.OK() {
		t.Errorf("got %s, OK %v; want unknown, not a pass", rep.Linearizability.Line(), rep.OK())
	}
	cfg.SkipLinearizability = true
	if rep, err = Run(t.Context(), cfg, nil); err != nil || rep.Linearizability.Verdict != LinNotChecked || !rep.OK() {
		t.Errorf("with the check skipped: got %v, %s, OK %v; want not checked and a pass", err, rep.Linearizability.Line(), rep.OK())
	}
}

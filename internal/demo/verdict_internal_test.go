package demo

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/loadtest"
)

// sold is a result of row r that ran, oversold or not, with the history's
// verdict lin and the fault's counters.
func sold(r row, oversold bool, lin loadtest.LinVerdict, leaseLost, fenceRejected, overlaps int64) *result {
	res := &result{row: r, ran: true, attempt: 1, leaseLost: leaseLost, fenceRejected: fenceRejected, overlaps: overlaps}
	res.rep.Oversold = oversold
	res.rep.Linearizability.Verdict = lin
	return res
}

// The verdict of each row asks for the evidence of its fault: a fault row
// whose sale lost no lease (or, fenced, had no late write refused; or,
// unfenced, no stalled holder overlapped) is "fault not injected", never
// ok, and is run again while it has sales left. A safety failure is a
// mismatch whether the fault happened or not.
func TestJudgeAsksForTheFault(t *testing.T) {
	rows := matrixRows(2)
	redis, local, none, fenced, unfenced := rows[0], rows[2], rows[3], rows[4], rows[5]
	if !fenced.expired || fenced.unsafe || !unfenced.expired || !unfenced.unsafe || local.mode != "local" || none.mode != "none" {
		t.Fatalf("matrixRows changed: %+v", rows)
	}
	yes, no := loadtest.LinYes, loadtest.LinNo
	for _, tt := range []struct {
		name string
		res  *result
		want verdict
		why  string
	}{
		{"fenced, as expected", sold(fenced, false, yes, 2, 2, 2), verdictOK, "leases lost: 2, late writes refused by the fence: 2"},
		{"fenced, no lease lost", sold(fenced, false, yes, 0, 0, 0), verdictNoFault, "no lease was lost, the fence refused no late write"},
		{"fenced, no lease lost but a rejection", sold(fenced, false, yes, 0, 1, 1), verdictNoFault, "no lease was lost"},
		{"fenced, leases lost but nothing refused", sold(fenced, false, yes, 3, 0, 0), verdictNoFault, "the fence refused no late write"},
		{"fenced, oversold without the fault", sold(fenced, true, no, 0, 0, 0), verdictMismatch, "OVERSOLD"},
		{"fenced, not linearizable", sold(fenced, false, no, 2, 2, 2), verdictMismatch, "must be linearizable"},
		{"unfenced, as expected", sold(unfenced, true, no, 3, 0, 2), verdictOK, "stalled holders that saw the next one get in: 2"},
		{"unfenced, no lease lost", sold(unfenced, false, yes, 0, 0, 0), verdictNoFault, "no lease was lost, no stalled holder saw the next one get in"},
		{"unfenced, no overlap", sold(unfenced, false, yes, 3, 0, 0), verdictNoFault, "no stalled holder saw the next one get in"},
		{"unfenced, the fault but no oversell seen", sold(unfenced, false, yes, 3, 0, 2), verdictMismatch, "the checker saw no oversell"},
		{"unfenced, oversold without a lost lease", sold(unfenced, true, no, 0, 0, 0), verdictMismatch, "did not come from the fault"},
		{"control, oversold", sold(none, true, no, 0, 0, 0), verdictOK, "nothing excludes anyone"},
		{"control, no oversell", sold(local, false, yes, 0, 0, 0), verdictNoFault, "the race did not happen"},
		{"redis, oversold", sold(redis, true, no, 0, 0, 0), verdictMismatch, "OVERSOLD"},
		{"redis, as expected", sold(redis, false, yes, 0, 0, 0), verdictOK, "excludes every replica"},
		{"did not run", &result{row: fenced, attempt: 1}, verdictError, "did not run"},
	} {
		got, why := tt.res.judge()
		if got != tt.want || !strings.Contains(why, tt.why) {
			t.Errorf("%s: got %q (%s), want %q with %q", tt.name, got, why, tt.want, tt.why)
		}
		if rerun := tt.want == verdictNoFault; tt.res.rerun() != rerun {
			t.Errorf("%s: rerun %v at sale 1 of %d, want %v", tt.name, !rerun, maxRowAttempts, rerun)
		}
	}
	last := sold(fenced, false, yes, 0, 0, 0)
	last.attempt = maxRowAttempts
	if last.rerun() {
		t.Errorf("sale %d of %d without its fault: rerun, want the row reported", last.attempt, maxRowAttempts)
	}
}

// A row that never got its fault fails the matrix as "fault not
// injected", with the sales that ran and why each was run again.
func TestWriteVerdictsFaultNotInjected(t *testing.T) {
	rows := matrixRows(2)
	ok := sold(rows[0], false, loadtest.LinYes, 0, 0, 0)
	res := sold(rows[4], false, loadtest.LinYes, 0, 0, 0)
	res.attempt = maxRowAttempts
	res.earlier = []string{"sale 1: no lease was lost", "sale 2: no lease was lost"}
	var b strings.Builder
	code := writeVerdicts(&b, []*result{ok, res}, false)
	if code != exitFail {
		t.Errorf("exit status: got %d, want %d", code, exitFail)
	}
	for _, want := range []string{
		"ok       redis did not oversell and is linearizable, as expected",
		"FAULT NOT INJECTED redis (lease expiry) in 3 sales (sale 1: no lease was lost; sale 2: no lease was lost; sale 3: no lease was lost, the fence refused no late write): the row shows nothing",
		"matrix: FAIL: 1 of 2 rows not as expected",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("verdicts lack %q:\n%s", want, b.String())
		}
	}
}

// The fault rows' hook: the first holder stalls until the next holder of
// one of its products reaches the hook, which ends the stall and counts
// an overlap (a holder of another product does not); a stall nobody ends
// lasts maxStall, and one whose request ends stops with it.
func TestStallHook(t *testing.T) {
	h := newStallHook(time.Millisecond, time.Minute, 0)
	first := make(chan struct{})
	go func() {
		defer close(first)
		h.run(context.Background(), []int64{1, 2})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := poll.Until(ctx, time.Millisecond, func() (bool, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.stalled) == 2, nil
	})
	if err != nil {
		t.Fatalf("the first holder did not stall: %v", err)
	}
	h.run(context.Background(), []int64{3}) // another product's holder: no overlap
	select {
	case <-first:
		t.Fatal("the first holder returned while stalled")
	default:
	}
	h.run(context.Background(), []int64{2}) // the next holder of product 2: probability 0, it does not stall
	select {
	case <-first:
	case <-ctx.Done():
		t.Fatal("the next holder's arrival did not end the first one's stall")
	}
	if n := h.overlapCount(); n != 1 || len(h.stalled) != 0 {
		t.Errorf("overlaps: got %d with %d products still stalled, want 1 and 0", n, len(h.stalled))
	}

	alone := newStallHook(0, 5*time.Millisecond, 1)
	alone.run(context.Background(), []int64{1}) // returns after maxStall
	if n := alone.overlapCount(); n != 0 || len(alone.stalled) != 0 {
		t.Errorf("a stall nobody ended: got %d overlaps and %d still stalled, want 0 and 0", n, len(alone.stalled))
	}
	gone, stop := context.WithCancel(context.Background())
	stop()
	newStallHook(0, time.Minute, 1).run(gone, []int64{1}) // returns at once
}

// netSold is a result of network-fault row r that ran, with the evidence
// its hook reported (injected, or what is missing).
func netSold(r row, oversold bool, lin loadtest.LinVerdict, leaseLost, fenceRejected int64, injected, missing string) *result {
	res := sold(r, oversold, lin, leaseLost, fenceRejected, 0)
	res.injected, res.notInjected = injected, missing
	return res
}

// A network-fault row passes only with its fault's evidence: another
// replica sold while replica 1 was caught in its critical section, and,
// for a cut link, replica 1's lease lost; fenced, its write refused. A
// row whose machine lacks what it needs is skipped, which neither runs it
// again nor fails the matrix.
func TestJudgeNetFaults(t *testing.T) {
	rows := matrixRows(2)
	cut, cutUnfenced, jump, jumpUnfenced := rows[6], rows[7], rows[8], rows[9]
	if cut.net != faultLinkCut || cut.unsafe || !cutUnfenced.unsafe || jump.net != faultClockJump || !jumpUnfenced.unsafe {
		t.Fatalf("matrixRows changed: %+v", rows[6:])
	}
	const seen = "replica 1's Redis link cut 1s in its critical section (169 bytes held); meanwhile the others took the lock and sold 3"
	const none = "no other replica sold within 5s of the link cut"
	yes, no := loadtest.LinYes, loadtest.LinNo
	for _, tt := range []struct {
		name string
		res  *result
		want verdict
		why  string
	}{
		{"link cut, as expected", netSold(cut, false, yes, 1, 1, seen, ""), verdictOK, seen + "; leases lost: 1, late writes refused by the fence: 1"},
		{"link cut, nobody else sold", netSold(cut, false, yes, 1, 0, "", none), verdictNoFault, none},
		{"link cut, no lease lost", netSold(cut, false, yes, 0, 1, seen, ""), verdictNoFault, "no lease was lost"},
		{"link cut, nothing refused", netSold(cut, false, yes, 1, 0, seen, ""), verdictNoFault, "the fence refused no late write"},
		{"link cut, oversold", netSold(cut, true, no, 1, 1, seen, ""), verdictMismatch, "OVERSOLD"},
		{"link cut unfenced, as expected", netSold(cutUnfenced, true, no, 1, 0, seen, ""), verdictOK, seen},
		{"link cut unfenced, no oversell seen", netSold(cutUnfenced, false, yes, 1, 0, seen, ""), verdictMismatch, "the checker saw no oversell"},
		{"link cut unfenced, oversold without the fault", netSold(cutUnfenced, true, no, 0, 0, "", none), verdictMismatch, "oversold without the fault"},
		{"clock jump, no lease lost is fine", netSold(jump, false, yes, 0, 1, seen, ""), verdictOK, "late writes refused by the fence: 1"},
		{"clock jump unfenced, nobody else sold", netSold(jumpUnfenced, false, yes, 1, 0, "", none), verdictNoFault, none},
		{"skipped", &result{row: jump, attempt: 1, skip: "needs redis-server"}, verdictSkipped, "needs redis-server"},
	} {
		got, why := tt.res.judge()
		if got != tt.want || !strings.Contains(why, tt.why) {
			t.Errorf("%s: got %q (%s), want %q with %q", tt.name, got, why, tt.want, tt.why)
		}
		if rerun := tt.want == verdictNoFault; tt.res.rerun() != rerun {
			t.Errorf("%s: rerun %v at sale 1 of %d, want %v", tt.name, !rerun, maxRowAttempts, rerun)
		}
	}

	var b strings.Builder
	ok := netSold(cut, false, yes, 1, 1, seen, "")
	if code := writeVerdicts(&b, []*result{ok, {row: jump, attempt: 1, skip: "needs redis-server"}}, false); code != exitOK {
		t.Errorf("a skipped row: exit status %d, want %d", code, exitOK)
	}
	for _, want := range []string{"SKIPPED  redis (clock jump) (redlock): needs redis-server", "matrix: PASS: all 1 rows that ran as expected, 1 skipped"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("verdicts lack %q:\n%s", want, b.String())
		}
	}
}

// The door of the network-fault rows lets reads through at once and holds
// every other request until it opens.
func TestDoorHoldsWritesUntilOpen(t *testing.T) {
	served := make(chan string, 4)
	open := make(chan struct{})
	d, err := openDoor(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served <- r.Method
		w.WriteHeader(http.StatusNoContent)
	}), open)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	}()
	do := func(method string) error {
		req, err := http.NewRequest(method, d.url+"/x", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			return fmt.Errorf("%s: status %d", method, resp.StatusCode)
		}
		return nil
	}
	if err := do(http.MethodGet); err != nil {
		t.Fatalf("a read before the door opened: %v", err)
	}
	if m := <-served; m != http.MethodGet {
		t.Fatalf("served %s, want GET", m)
	}
	post := make(chan error, 1)
	go func() { post <- do(http.MethodPost) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := poll.Until(ctx, time.Millisecond, func() (bool, error) { return d.waiting.Load() == 1, nil }); err != nil {
		t.Fatalf("the POST is not waiting at the door: %v", err)
	}
	// Held at the door, a read still goes through.
	if err := do(http.MethodGet); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-served:
		if m != http.MethodGet {
			t.Fatalf("served %s before the door opened, want only the GET", m)
		}
	case err := <-post:
		t.Fatalf("the POST was answered before the door opened: %v", err)
	}
	close(open)
	if err := <-post; err != nil {
		t.Fatalf("the POST after the door opened: %v", err)
	}
	if m := <-served; m != http.MethodPost {
		t.Fatalf("served %s, want the POST", m)
	}
	http.DefaultClient.CloseIdleConnections()
}

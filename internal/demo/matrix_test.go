package demo_test

import (
	"context"
	"os"
	"strings"
	"testing"
)

// The matrix shows oversell exactly where it should: not under the Redis
// lock, batched or not, with or without expiring leases (the fence refuses
// the late writes), and in each of the three broken configurations, with
// nothing injected into the rows without a fault: the burst alone races.
// The rows without an oversell must also have linearizable histories.
func TestMatrix(t *testing.T) {
	// The rows' temporary directories go here, so the test can see that
	// none is left; the matrix does not print their paths.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	r := runDemo(t, context.Background(), nil, map[string]string{"SECKILL_DEMO_REDIS": "embedded"},
		"-matrix", "-buyers", "1000", "-stock", "50")
	if r.code != 0 {
		t.Errorf("exit status: got %d, want 0", r.code)
	}
	for _, want := range []string{
		"oversold  linearizable  purchases/s",
		"ok       redis did not oversell and is linearizable",
		"ok       redis (one at a time) did not oversell and is linearizable",
		"ok       local oversold",
		"ok       none oversold",
		"ok       redis (lease expiry) did not oversell and is linearizable",
		"ok       redis (lease expiry, no fence) oversold",
		"matrix: PASS: all 6 rows as expected",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	assertRedisGone(t, r)
	if left, err := os.ReadDir(tmp); err != nil || len(left) > 0 {
		t.Errorf("temporary directories left behind: %v (%v)", left, err)
	}
}

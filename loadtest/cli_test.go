package loadtest

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// runMain runs Main with a short sale's flags plus extra (60 requests at
// 1000 a second: the count ends it), and ADMIN_TOKEN from env.
func runMain(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	base := []string{"-rate", "1000", "-duration", "10s", "-max-requests", "60", "-stock", "3", "-progress", "off"}
	code = Main(t.Context(), append(base, args...), func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestMainExitCodes(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // where the check's visualization goes
	token := map[string]string{"ADMIN_TOKEN": "secret"}
	cases := []struct {
		name       string
		racy       bool
		args       []string
		want       int
		wantStdout string
	}{
		{"correct shop", false, nil, ExitOK, "PASS: every safety invariant held"},
		{"racy shop", true, nil, ExitFail, "FAIL: OVERSOLD"},
		{"racy shop, oversell expected", true, []string{"-expect-oversell"}, ExitOK, "PASS: oversell detected"},
		{"correct shop, oversell expected", false, []string{"-expect-oversell"}, ExitFail, "FAIL: an oversell was expected"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := newFakeShop(tc.racy).serve(t)
			code, stdout, stderr := runMain(t, token, append([]string{"-targets", a}, tc.args...)...)
			if code != tc.want || !strings.Contains(stdout, tc.wantStdout) {
				t.Errorf("got exit %d, want %d with %q\nstdout:\n%s\nstderr:\n%s", code, tc.want, tc.wantStdout, stdout, stderr)
			}
		})
	}
}

func TestMainErrors(t *testing.T) {
	a, _ := newFakeShop(false).serve(t)
	down := closedURL(t)
	token := map[string]string{"ADMIN_TOKEN": "secret"}
	cases := []struct {
		name       string
		env        map[string]string
		args       []string
		wantStderr string
	}{
		{"not a URL", token, []string{"-targets", "127.0.0.1:8080"}, "want an http:// or https:// base URL"},
		{"ftp target", token, []string{"-targets", "ftp://" + strings.TrimPrefix(a, "http://")}, "http://"},
		{"one of two targets down", token, []string{"-targets", a + "," + down}, "is not reachable"},
		{"token rejected", nil, []string{"-targets", a, "-admin-token", "wrong"}, "admin token"},
		{"no token", nil, []string{"-targets", a}, "ADMIN_TOKEN"},
		{"unknown flag", token, []string{"-targets", a, "-nope"}, "flag provided but not defined"},
		{"stray argument", token, []string{"-targets", a, "extra"}, `unexpected argument "extra"`},
		{"zero rate", token, []string{"-targets", a, "-rate", "0"}, "must be positive"},
		{"burst and rate", token, []string{"-targets", a, "-buyers", "10"}, "choose one"},
		{"burst window and rate", token, []string{"-targets", a, "-burst-window", "1s"}, "choose one"},
		{"bad progress", token, []string{"-targets", a, "-progress", "fancy"}, "-progress"},
		{"repeat share out of range", token, []string{"-targets", a, "-repeat-share", "2"}, "repeat share"},
		{"bad mix", token, []string{"-targets", a, "-mix", "reads=lots"}, "-mix"},
		{"zero check timeout", token, []string{"-targets", a, "-check-timeout", "0s"}, "-check-timeout must be positive"},
		{"history in no directory", token, []string{"-targets", a, "-history", "/no/such/dir/h.jsonl"}, "history file"},
		{"pay and cancel above 1", token, []string{"-targets", a, "-pay", "0.8", "-cancel", "0.3"}, "together at most 1"},
		{"late share out of range", token, []string{"-targets", a, "-pay-late", "-0.1"}, "late share"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runMain(t, tc.env, tc.args...)
			if code != ExitError || !strings.Contains(stderr, tc.wantStderr) {
				t.Errorf("got exit %d, stderr %q; want %d mentioning %q", code, stderr, ExitError, tc.wantStderr)
			}
		})
	}
}

// Without -rate or -duration the load is a burst of -buyers, and the
// report says so.
func TestMainBurstIsTheDefault(t *testing.T) {
	a, hits := newFakeShop(false).serve(t)
	var out, errOut bytes.Buffer
	args := []string{"-targets", a, "-buyers", "300", "-stock", "5", "-progress", "off"}
	code := Main(t.Context(), args, func(string) string { return "secret" }, &out, &errOut)
	if code != ExitOK || !strings.Contains(out.String(), "burst of 300 buyers at once, on up to 300 connections") {
		t.Fatalf("got exit %d\nstdout:\n%s\nstderr:\n%s\nwant 0 and the shape in the report", code, out.String(), errOut.String())
	}
	if hits.Load() != 300 {
		t.Errorf("got %d purchases sent, want 300", hits.Load())
	}
}

func TestMainHelpDoesNotPrintTheToken(t *testing.T) {
	var out, errOut bytes.Buffer
	code := Main(t.Context(), []string{"-h"}, func(string) string { return "s3cret-token" }, &out, &errOut)
	if code != ExitOK || !strings.Contains(errOut.String(), "-expect-oversell") || strings.Contains(errOut.String(), "s3cret") {
		t.Errorf("got exit %d, usage:\n%s\nwant 0 and a usage without the token", code, errOut.String())
	}
}

// The flags of a reservation's life reach the sale: against a shop with a
// window, the buyers pay, cancel and lapse as asked, the close-out sells
// what came back, and the report says so.
func TestMainBuyersPayCancelAndLapse(t *testing.T) {
	shop := newFakeShop(false)
	shop.life = fakeLife{window: 200 * time.Millisecond, expireEvery: 20 * time.Millisecond}
	a, _ := shop.serve(t)
	var out, errOut bytes.Buffer
	args := []string{"-targets", a, "-buyers", "200", "-burst-window", "1s", "-stock", "5", "-progress", "off",
		"-pay", "0.5", "-cancel", "0.25", "-pay-late", "0.5", "-lag", "2s", "-close-out"}
	code := Main(t.Context(), args, func(string) string { return "secret" }, &out, &errOut)
	for _, want := range []string{"buyers with a pending order pay 50% (50% of them late), cancel 25%, lapse 25%, then a close-out",
		"late pay 409 order_expired", "cancel 200", "PASS (6) all sold when demand exceeded S", "(bound 2s)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if code != ExitOK {
		t.Errorf("got exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
}

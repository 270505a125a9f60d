package lock

import (
	"embed"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// The shared parts of the scripts that issue tokens and hand the lock over.
// Each script is assembled from them, in this order:
//
//   - the release's fast path (release_fast.lua), which issues no token and
//     so runs before any function below is defined;
//   - token.lua, the clock and the fencing token, then a token rule, which
//     may replace its functions (unsafe_counter_tokens.lua, or a broken rule
//     of a test's control);
//   - the acquire's fast path (acquire_fast.lua), which issues a token by
//     that rule;
//   - the general path, wrapped in a function that only the cases the fast
//     path left run: common.lua, then a rule that may replace common.lua's
//     functions (a test's control), then the script's own part. Lua defines
//     a function's local functions only when it runs, so the fast path pays
//     for none of common.lua's helpers.
//
// The fast paths decide the uncontended case and return.
//
//go:embed lua/parts/*.lua
var parts embed.FS

func part(name string) string {
	b, err := parts.ReadFile("lua/parts/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	return string(b)
}

// scriptSources assembles acquire, release and withdraw with tokenRule
// after token.lua and rule after common.lua.
func scriptSources(tokenRule, rule string) (acquire, release, withdraw string) {
	build := func(beforeToken, fast, general string) string {
		return beforeToken + part("token") + tokenRule + fast +
			"local function general()\n" + part("common") + rule + part(general) + "\nend\nreturn general()\n"
	}
	return build("", part("acquire_fast"), "acquire"),
		build(part("release_fast"), "", "release"),
		build("", "", "withdraw")
}

const generatedHeader = "-- Generated from lua/parts/ by scripts_gen_test.go; do not edit. Run\n" +
	"-- go test ./lock -run TestScriptsAreUpToDate -args -update after changing a part.\n"

var update = flag.Bool("update", false, "rewrite the generated scripts in lua/")

// The whole scripts in lua/, which the Locker runs, are the parts put
// together: a reader of one file reads all of what Redis runs.
func TestScriptsAreUpToDate(t *testing.T) {
	acquire, release, withdraw := scriptSources("", "")
	cAcquire, cRelease, cWithdraw := scriptSources(part("unsafe_counter_tokens"), "")
	for name, src := range map[string]string{
		"acquire": acquire, "release": release, "withdraw": withdraw,
		"acquire_counter_tokens": cAcquire, "release_counter_tokens": cRelease, "withdraw_counter_tokens": cWithdraw,
	} {
		path := filepath.Join("lua", name+".lua")
		want := generatedHeader + src
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("%s is not the parts put together (%v): run go test ./lock -run TestScriptsAreUpToDate -args -update", path, err)
		}
	}
}

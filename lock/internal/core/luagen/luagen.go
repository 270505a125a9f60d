// Package luagen puts the lock's scripts together from their shared parts
// (lock/internal/core/lua/parts): each script in lua/ is then a whole
// file that reads as what Redis runs. `go generate ./lock/...` writes them
// (gen.go in package core), and a test of package core checks that the
// committed files are what the parts give.
//
// Each script is assembled in this order:
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
package luagen

import (
	"io/fs"
)

// Header starts every generated file.
const Header = "-- Generated from lua/parts/ by gen.go; do not edit. Run go generate\n" +
	"-- ./lock/... after changing a part.\n"

// Build assembles acquire, release and withdraw from the parts in parts,
// with tokenRule after token.lua and rule after common.lua (both "" for
// the lock as it runs).
func Build(parts fs.FS, tokenRule, rule string) (acquire, release, withdraw string, err error) {
	part := func(name string) string {
		b, rerr := fs.ReadFile(parts, name+".lua")
		if rerr != nil && err == nil {
			err = rerr
		}
		return string(b)
	}
	build := func(beforeToken, fast, general string) string {
		return beforeToken + part("token") + tokenRule + fast +
			"local function general()\n" + part("common") + rule + part(general) + "\nend\nreturn general()\n"
	}
	acquire = build("", part("acquire_fast"), "acquire")
	release = build(part("release_fast"), "", "release")
	withdraw = build("", "", "withdraw")
	return acquire, release, withdraw, err
}

// Files are the generated files, by name, as they are committed: the
// scripts the lock runs, and their variants with the unsafe counter
// tokens of Options.UnsafeCounterTokens.
func Files(parts fs.FS) (map[string]string, error) {
	unsafe, err := fs.ReadFile(parts, "unsafe_counter_tokens.lua")
	if err != nil {
		return nil, err
	}
	a, r, w, err := Build(parts, "", "")
	if err != nil {
		return nil, err
	}
	ca, cr, cw, err := Build(parts, string(unsafe), "")
	if err != nil {
		return nil, err
	}
	files := map[string]string{
		"acquire.lua": a, "release.lua": r, "withdraw.lua": w,
		"acquire_counter_tokens.lua": ca, "release_counter_tokens.lua": cr, "withdraw_counter_tokens.lua": cw,
	}
	for name, src := range files {
		files[name] = Header + src
	}
	return files, nil
}

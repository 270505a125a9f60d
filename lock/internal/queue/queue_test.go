package queue

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/seckill-ref/seckill/lock/internal/core"
)

// Every script carries token.lua and line.lua as they are: a reader of one
// script reads all of what Redis runs. A copy left behind by an edit of
// either fails here (go generate ./lock/... brings it in step).
func TestScriptsCarryTheirSharedFiles(t *testing.T) {
	line, err := os.ReadFile(filepath.Join("lua", "line.lua"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"wait.lua", "release.lua", "withdraw.lua"} {
		src, err := os.ReadFile(filepath.Join("lua", name))
		if err != nil {
			t.Fatal(err)
		}
		for part, body := range map[string]string{"token.lua": core.TokenLua, "line.lua": string(line)} {
			want, err := core.Splice(string(src), part, body)
			if err != nil || want != string(src) {
				t.Errorf("lua/%s does not carry %s as it is (%v): run go generate ./lock/...", name, part, err)
			}
		}
	}
}

// A grant message names the last token reserved with the granted one; a
// message without it reserves none, and one whose last is below its token
// is refused.
func TestParseGrant(t *testing.T) {
	for _, c := range []struct {
		msg         string
		token, last int64
		ok          bool
	}{
		{"p t 10 13", 10, 13, true},
		{"p t 10", 10, 10, true},
		{"p t 10 9", 0, 0, false},
		{"p t x 13", 0, 0, false},
		{"p t", 0, 0, false},
	} {
		_, _, token, last, ok := ParseGrant(c.msg)
		if ok != c.ok || (ok && (token != c.token || last != c.last)) {
			t.Errorf("ParseGrant(%q) = %d, %d, %v; want %d, %d, %v", c.msg, token, last, ok, c.token, c.last, c.ok)
		}
	}
}

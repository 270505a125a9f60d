package core

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/seckill-ref/seckill/lock/internal/core/luagen"
)

// The whole scripts in lua/, which the lock runs, are the parts put
// together (go generate, gen.go): a reader of one file reads all of what
// Redis runs. A part changed without regenerating fails here.
func TestScriptsAreUpToDate(t *testing.T) {
	files, err := luagen.Files(os.DirFS(filepath.Join("lua", "parts")))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		path := filepath.Join("lua", name)
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("%s is not the parts put together (%v): run go generate ./lock/...", path, err)
		}
	}
}

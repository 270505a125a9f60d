package browsertest_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/testinfra/browsertest"
)

// The browser renders a page, answers an evaluation and takes a
// screenshot; when its test ends, none of its processes is left.
func TestBrowserRunsAndLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: headless Chromium")
	}
	page := filepath.Join(t.TempDir(), "page.html")
	if err := os.WriteFile(page, []byte(`<!DOCTYPE html><p id="x">hello</p><script>document.getElementById("x").dataset.n = String(6*7)</script>`), 0o644); err != nil {
		t.Fatal(err)
	}
	var b *browsertest.Browser
	t.Run("browse", func(t *testing.T) {
		b = browsertest.Start(t, 800, 600)
		b.Navigate("file://" + page)
		b.WaitTrue(`document.getElementById("x").dataset.n === "42"`, 10*time.Second, func() string { return "the script did not run" })
		if text := browsertest.Eval[string](b, `document.getElementById("x").textContent`); text != "hello" {
			t.Errorf("got %q, want hello", text)
		}
		shot := filepath.Join(t.TempDir(), "shot.png")
		b.Screenshot(shot)
		if fi, err := os.Stat(shot); err != nil || fi.Size() < 100 {
			t.Errorf("screenshot: %v, %v", fi, err)
		}
		// The check below finds the processes while they run.
		n, err := b.Processes()
		if errors.Is(err, errors.ErrUnsupported) {
			t.Skip(err)
		}
		if err != nil || n == 0 {
			t.Errorf("found no Chromium process with the profile directory while the browser runs (%v)", err)
		}
	})
	if b == nil {
		return
	}
	n, err := b.Processes()
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil || n != 0 {
		t.Errorf("%d Chromium processes outlived their test (%v)", n, err)
	}
}

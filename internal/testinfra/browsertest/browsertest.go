// Package browsertest gives tests a real headless Chromium, driven through
// the DevTools protocol by chromedp: a test opens a page, waits for a
// condition evaluated in the page, reads values out of the DOM, and saves
// screenshots. There is no fallback: when Chromium is missing the test
// fails and says how to install it (scripts/test.sh does).
//
// The browser runs with a fresh profile directory of its own, and every
// process started with that directory (the browser and its zygote,
// renderer, GPU and network children) is gone when the test ends. Those
// processes are found in /proc on Linux and with ps on other Unix systems;
// on Windows they are not looked for (Processes says so).
package browsertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Names of the Chromium binary, in the order they are looked for on PATH.
var binaries = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// Where macOS keeps the binaries of Chromium and Google Chrome, which are
// app bundles, not on PATH; looked at after PATH.
var bundles = []string{
	"/Applications/Chromium.app/Contents/MacOS/Chromium",
	"/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
}

// chromium is the path of the first Chromium found, or "".
func chromium() string {
	for _, name := range binaries {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	for _, p := range bundles {
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// Browser is one Chromium and one tab in it.
type Browser struct {
	t       testing.TB
	ctx     context.Context // the tab
	dataDir string
}

// Start starts Chromium for the duration of t. The width and height are
// the window's, in CSS pixels: the size of the screenshots.
func Start(t testing.TB, width, height int) *Browser {
	t.Helper()
	path := chromium()
	if path == "" {
		t.Fatal("no Chromium on PATH or in /Applications: install it (Debian: apt-get install chromium; macOS: brew install --cask chromium; scripts/test.sh does it)")
	}
	// Registered first, so removed last: after the processes using it.
	dataDir := t.TempDir()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		// As root, Chromium refuses to start without this; the pages are the
		// test's own, from loopback or a file.
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(dataDir),
		chromedp.WindowSize(width, height),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	b := &Browser{t: t, ctx: ctx, dataDir: dataDir}
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // kills the browser and waits for it
		b.stopLeftovers()
	})
	// The first call starts the browser, which lives as long as that
	// call's context: ctx itself, without a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return b
}

// stopLeftovers kills whatever still runs with the profile directory, and
// fails the test if something still does after a few seconds. Where the
// processes cannot be listed, the browser's own end is all there is.
func (b *Browser) stopLeftovers() {
	deadline := time.Now().Add(5 * time.Second)
	quiet := 0
	for quiet < 3 {
		pids, err := processesUsing(b.dataDir)
		if err != nil {
			return
		}
		for _, pid := range pids {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
		if len(pids) == 0 {
			quiet++
		} else {
			quiet = 0
		}
		if time.Now().After(deadline) {
			b.t.Errorf("Chromium processes using %s still run after 5s", b.dataDir)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Processes counts the processes started with the browser's profile
// directory: Chromium passes --user-data-dir to every child it starts. The
// error wraps errors.ErrUnsupported where they cannot be listed (Windows).
func (b *Browser) Processes() (int, error) {
	pids, err := processesUsing(b.dataDir)
	return len(pids), err
}

// DataDir is the browser's profile directory.
func (b *Browser) DataDir() string { return b.dataDir }

// Navigate opens url in the tab and waits for the document to load.
func (b *Browser) Navigate(url string) {
	b.t.Helper()
	b.run(30*time.Second, "open "+url, chromedp.Navigate(url))
}

// Eval evaluates the JavaScript expression js in b's page and returns its
// value, decoded from JSON into a T.
func Eval[T any](b *Browser, js string) T {
	b.t.Helper()
	v, err := evalErr[T](b, js)
	if err != nil {
		b.t.Fatalf("browser: evaluate %s: %v", js, err)
	}
	return v
}

func evalErr[T any](b *Browser, js string) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](js))
}

// WaitTrue evaluates the JavaScript expression js every 100 ms until it is
// true, and fails the test with what describe returns if timeout passes
// first.
func (b *Browser) WaitTrue(js string, timeout time.Duration, describe func() string) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := evalErr[bool](b, "Boolean("+js+")")
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("after %v, still not true in the page: %s (%v); %s", timeout, js, err, describe())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Screenshot saves the whole page as a PNG file at path.
func (b *Browser) Screenshot(path string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("browser: screenshot: %v", err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		b.t.Fatalf("screenshot: got %d bytes that are not a PNG", len(png))
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

func (b *Browser) run(timeout time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %v: %w", timeout, err)
		}
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

// ScreenshotPath is where a test saves a screenshot called name: in
// $SECKILL_SCREENSHOTS when set (to update the ones in docs/), else in a
// temporary directory of the test.
func ScreenshotPath(t testing.TB, name string) string {
	if dir := os.Getenv("SECKILL_SCREENSHOTS"); dir != "" {
		return filepath.Join(dir, name)
	}
	return filepath.Join(t.TempDir(), name)
}

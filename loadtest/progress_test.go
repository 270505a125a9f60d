package loadtest

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

func TestProgressLine(t *testing.T) {
	var c liveCounts
	c.created.Add(20)
	c.conflict.Add(70)
	c.busy.Add(9)
	c.errors.Add(1)
	got := progressLine(1500*time.Millisecond, 100, 250, &c)
	want := "   1.5s  sent 100  250 req/s  201: 20  409: 70  503: 9  errors: 1"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestProgressModes(t *testing.T) {
	sent := func() uint64 { return 0 }
	var c liveCounts
	if p := newProgress(&bytes.Buffer{}, ProgressOff, time.Now(), sent, &c); p != nil {
		t.Error("got a progress printer with ProgressOff, want none")
	}
	if p := newProgress(&bytes.Buffer{}, ProgressAuto, time.Now(), sent, &c); p == nil || p.inPlace {
		t.Error("got in-place progress on a buffer, want lines")
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	// A character device, yet not a terminal.
	if isTerminal(devNull) {
		t.Errorf("got %s taken for a terminal", os.DevNull)
	}
}

func TestProgressInPlaceRedrawsOneLine(t *testing.T) {
	var out bytes.Buffer
	var c liveCounts
	var sent uint64 = 1000
	start := time.Now()
	p := newProgress(&out, ProgressInPlace, start, func() uint64 { return sent }, &c)

	p.draw(start.Add(time.Second), false)
	sent = 1500
	p.draw(start.Add(2*time.Second), true)

	s := out.String()
	if strings.Count(s, "\r") != 2 || strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") {
		t.Errorf("got %q, want two redraws with \\r and one final newline", s)
	}
	if !strings.Contains(s, "sent 1000  1000 req/s") || !strings.Contains(s, "sent 1500  750 req/s") {
		t.Errorf("got %q, want the interval rate then the mean rate at the end", s)
	}
}

func TestProgressLinesStopsWithAFinalLine(t *testing.T) {
	var out bytes.Buffer
	var c liveCounts
	p := newProgress(&out, ProgressLines, time.Now(), func() uint64 { return 3 }, &c)
	stop := make(chan struct{})
	close(stop)
	p.run(stop) // returns after the final line, without waiting for a tick
	if s := out.String(); strings.Contains(s, "\r") || strings.Count(s, "\n") != 1 || !strings.Contains(s, "sent 3") {
		t.Errorf("got %q, want one plain line", s)
	}
}

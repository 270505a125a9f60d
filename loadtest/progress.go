package loadtest

import (
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/term"
)

// Update intervals: a terminal line is cheap to redraw, a log line is not.
const (
	inPlaceEvery = 250 * time.Millisecond
	linesEvery   = time.Second
)

// progress draws the live progress line from the counters an attack updates.
type progress struct {
	w       io.Writer
	inPlace bool
	every   time.Duration
	start   time.Time
	sent    func() uint64
	live    *liveCounts

	lastSent uint64
	lastAt   time.Time
	width    int // of the last in-place line, to blank leftovers
}

// newProgress returns nil when mode is ProgressOff.
func newProgress(w io.Writer, mode ProgressMode, start time.Time, sent func() uint64, live *liveCounts) *progress {
	if mode == ProgressAuto {
		mode = ProgressLines
		if isTerminal(w) {
			mode = ProgressInPlace
		}
	}
	if mode == ProgressOff {
		return nil
	}
	p := &progress{w: w, inPlace: mode == ProgressInPlace, start: start, sent: sent, live: live, lastAt: start}
	p.every = linesEvery
	if p.inPlace {
		p.every = inPlaceEvery
	}
	return p
}

// isTerminal reports whether w is a terminal, where \r redraws a line. A
// character device is not enough: /dev/null is one too.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// run redraws the line every p.every until stop is closed, then draws it a
// last time and ends it with a newline. It returns when that is written.
func (p *progress) run(stop <-chan struct{}) {
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case now := <-t.C:
			p.draw(now, false)
		case <-stop:
			p.draw(time.Now(), true)
			return
		}
	}
}

func (p *progress) draw(now time.Time, final bool) {
	sent := p.sent()
	rate := 0.0
	if dt := now.Sub(p.lastAt).Seconds(); dt > 0 {
		rate = float64(sent-p.lastSent) / dt
	}
	p.lastSent, p.lastAt = sent, now
	if final {
		// The last interval is a fraction of one: show the mean instead.
		rate = 0
		if el := now.Sub(p.start).Seconds(); el > 0 {
			rate = float64(sent) / el
		}
	}
	line := progressLine(now.Sub(p.start), sent, rate, p.live)
	if !p.inPlace {
		fmt.Fprintln(p.w, line)
		return
	}
	pad := max(0, p.width-len(line))
	p.width = len(line)
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(p.w, "\r%s%s%s", line, strings.Repeat(" ", pad), end)
}

// progressLine formats one progress line.
func progressLine(elapsed time.Duration, sent uint64, rate float64, c *liveCounts) string {
	return fmt.Sprintf("%6.1fs  sent %d  %.0f req/s  201: %d  409: %d  503: %d  errors: %d",
		elapsed.Seconds(), sent, rate,
		c.created.Load(), c.conflict.Load(), c.busy.Load(), c.errors.Load())
}

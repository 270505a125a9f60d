package demo

import (
	"fmt"
	"strings"

	"github.com/seckill-ref/seckill/loadtest"
)

// verdict is how a row of the matrix came out.
type verdict string

const (
	verdictOK       verdict = "ok"
	verdictMismatch verdict = "mismatch"
	// verdictNoFault: the sale ran, but the row's fault did not happen
	// (no lease lost, no late write for the fence to refuse, or in a
	// control row no oversell), so it shows nothing either way.
	verdictNoFault verdict = "fault not injected"
	verdictError   verdict = "error"
	// verdictSkipped: the row needs what this machine lacks.
	verdictSkipped verdict = "skipped"
)

// judge decides r's verdict and says why. A safety failure is a mismatch
// whatever else happened: no missing fault excuses an oversell the row
// must not have. Otherwise a fault row passes only with the evidence of
// its fault: leases lost and, with the fence on, late writes refused;
// with it off, a stalled holder that saw the next one get in. A network
// fault's evidence is another replica selling while replica 1, in the
// critical section the fault caught, still held the lock in its own eyes
// (and, for a cut link, its lease lost; with the fence on, its write
// refused). A control
// row's fault is its race, and an oversell is its evidence: without one,
// the race did not happen (verdictNoFault), unless the fault was seen,
// and then the checker missed what it caused.
func (r *result) judge() (verdict, string) {
	lin := r.rep.Linearizability
	switch {
	case r.skip != "":
		return verdictSkipped, r.skip
	case !r.ran || r.err != nil:
		return verdictError, "did not run to the end"
	case r.design != nil:
		return r.designJudge() // matrix_designs.go
	case !r.oversell && r.rep.Oversold:
		return verdictMismatch, "OVERSOLD, and it must not"
	case !r.oversell && lin.Verdict != loadtest.LinYes:
		return verdictMismatch, "did not oversell, but its history must be linearizable: " + lin.Line()
	case r.expired && r.rep.Oversold && r.leaseLost == 0:
		return verdictMismatch, "oversold without losing a lease: the oversell did not come from the fault"
	case r.net != "" && r.rep.Oversold && r.injected == "":
		return verdictMismatch, "oversold without the fault (" + r.notInjected + "): the oversell did not come from it"
	case r.pfault != noProductsFault && r.rep.Oversold && r.pev.missing != "":
		return verdictMismatch, "oversold without the fault (" + r.pev.missing + "): the oversell did not come from it"
	}
	if missing := r.missingFault(); missing != "" {
		return verdictNoFault, missing
	}
	if r.oversell && !r.rep.Oversold {
		return verdictMismatch, fmt.Sprintf("did not oversell, but it should have: %s, and the checker saw no oversell", r.faultText())
	}
	why := r.why
	if r.expired || r.net != "" || r.pfault != noProductsFault {
		why += " (" + r.faultText() + ")"
	}
	return verdictOK, why
}

// missingFault says what evidence of the row's fault the sale lacks, or
// "" when it has it all.
func (r *result) missingFault() string {
	var missing []string
	switch {
	case r.pfault != noProductsFault:
		if m := r.productsMissing(); m != "" {
			missing = append(missing, m)
		}
	case r.net != "":
		if r.injected == "" {
			missing = append(missing, r.notInjected)
		}
		if r.net == faultLinkCut && r.leaseLost == 0 {
			missing = append(missing, "no lease was lost")
		}
		if !r.unsafe && r.fenceRejected == 0 {
			missing = append(missing, "the fence refused no late write")
		}
	case r.expired:
		if r.leaseLost == 0 {
			missing = append(missing, "no lease was lost")
		}
		if !r.unsafe && r.fenceRejected == 0 {
			missing = append(missing, "the fence refused no late write")
		}
		if r.unsafe && r.overlaps == 0 {
			missing = append(missing, "no stalled holder saw the next one get in")
		}
	case r.oversell && !r.rep.Oversold:
		missing = append(missing, "no oversell: the race did not happen")
	}
	return strings.Join(missing, ", ")
}

// faultText is the evidence of a fault row's fault, in words.
func (r *result) faultText() string {
	if r.pfault != noProductsFault {
		return r.productsFaultText()
	}
	s := fmt.Sprintf("leases lost: %d", r.leaseLost)
	if !r.unsafe {
		s += fmt.Sprintf(", late writes refused by the fence: %d", r.fenceRejected)
	}
	if r.net != "" {
		return r.injected + "; " + s
	}
	return s + fmt.Sprintf(", stalled holders that saw the next one get in: %d", r.overlaps)
}

// rerun reports whether the row should run again: its fault did not
// happen, and it has sales left.
func (r *result) rerun() bool {
	v, _ := r.judge()
	return v == verdictNoFault && r.attempt < maxRowAttempts
}

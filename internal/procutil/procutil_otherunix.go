//go:build unix && !linux

package procutil

// KillsWithParent reports whether the children Start guards with
// DefaultGuard die with this process even when it is killed: true, by the
// lifeline, on Unix systems other than Linux.
func KillsWithParent() bool { return true }

// run starts p.Cmd, reports the result on started, and waits for the
// child. Without a parent-death signal, the default guard is the
// lifeline.
func run(p *Process, g Guard, started chan<- error) {
	ownGroup(p.Cmd)
	startAndWait(p, g != NoGuard, started)
}

//go:build !linux

package procutil

// ParentDeathSignal reports whether children die with this process even
// when it is killed: false outside Linux, which has no parent-death signal;
// children are stopped by the normal clean-up only.
const ParentDeathSignal = false

// run starts p.Cmd, reports the result on started, and waits for the
// child.
func run(p *Process, _ bool, started chan<- error) {
	if err := p.Cmd.Start(); err != nil {
		started <- err
		return
	}
	started <- nil
	p.err = p.Cmd.Wait()
	close(p.done)
}

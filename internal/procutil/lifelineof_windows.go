//go:build windows

package procutil

// LifelineOf is 0 on Windows: a Job Object guards the children there, not
// a lifeline watcher.
func LifelineOf(int) (int, error) { return 0, nil }

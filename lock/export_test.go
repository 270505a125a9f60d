package lock

import "time"

// SetHealthInterval shortens the subscription's health check for a test.
// Call it before creating the Lockers it should apply to.
func SetHealthInterval(d time.Duration) (restore func()) {
	old := healthInterval
	healthInterval = d
	return func() { healthInterval = old }
}

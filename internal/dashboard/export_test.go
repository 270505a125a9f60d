package dashboard

import "time"

// SampleTop is how many products a replica writes fields for per second.
const SampleTop = sampleTop

// SetClock makes d read the time from now. Call it before Start.
func SetClock(d *Dashboard, now func() time.Time) { d.now = now }

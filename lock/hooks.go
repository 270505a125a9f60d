package lock

import "time"

// hooks are the package's test switches: each breaks one safeguard, to
// show the failure it prevents, or lets a test observe or shorten a step.
// The zero value is the lock as documented; only export_test.go changes
// it, while no Locker is in use.
var hooks hookSet

type hookSet struct {
	// noReleaseInference: a release whose first call's reply was lost
	// reports only what its second call saw (Locker.release).
	noReleaseInference bool
	// acquireIgnoresClose: Acquire returns what it won even when Close
	// began meanwhile.
	acquireIgnoresClose bool
	// keepSubMillisecond: durations finer than Redis's milliseconds are
	// kept (Options.withDefaults).
	keepSubMillisecond bool
	// retryScriptCalls: go-redis may send every script call again when its
	// reply is lost (runOnce).
	retryScriptCalls bool
	// unsubscribeByQueue: an ending driver removes its lock's channel
	// entry whenever it belongs to the same queue, also one a newer driver
	// added (Locker.unsubscribe).
	unsubscribeByQueue bool
	// scripts, when set, replace the lock's scripts (a broken rule of
	// export_test.go in place).
	scripts *scriptSet
	// healthInterval, when set, replaces healthInterval.
	healthInterval time.Duration
	// onEvent, when set, is told of the steps named by event.
	onEvent func(event, name string)
}

// event tells a test of a step it orders others around: "subscribed" (a
// driver's subscription is in place), "unsubscribe" (an ending driver is
// about to remove it) and "unsubscribed", with the lock's name.
func (h *hookSet) event(event, name string) {
	if h.onEvent != nil {
		h.onEvent(event, name)
	}
}

// health is how long the subscription may stay silent before it is pinged;
// a ping unanswered for as long again means the connection is dead (a peer
// gone without a FIN), and it is replaced. It also bounds every call on the
// subscription's connection.
func (h *hookSet) health() time.Duration {
	if h.healthInterval > 0 {
		return h.healthInterval
	}
	return healthInterval
}

const healthInterval = 5 * time.Second

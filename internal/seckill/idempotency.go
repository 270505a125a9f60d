package seckill

import (
	"errors"
	"time"
)

// Requests done at most once.
//
// A purchase, a payment or a cancel sent with an idempotency key is done at
// most once per user and key: a retry with the same key and the same
// request gets the first answer again and changes nothing. The key is the
// user's own, so two users' equal keys are two keys. Package store keeps a
// record per key where every replica sees it; the HTTP API (package
// handlers) claims the key before the request runs and records the answer
// after. The answer is kept as the API wrote it (Reply): the domain carries
// it without reading it.

// MaxKeyLength is the longest idempotency key accepted, in bytes.
const MaxKeyLength = 255

// RequestKey names a request that is to be done at most once: the user's
// key, in the user's scope.
type RequestKey struct {
	UserID string
	Key    string
}

// KeyClaim asks for a key before its request runs.
type KeyClaim struct {
	RequestKey
	// Fingerprint is a digest of the request (method, route, parameters,
	// body): a key first used for another request is not the same request's
	// key.
	Fingerprint string
	// At is when the claim is made, by the claiming replica's clock.
	At time.Time
	// StaleBefore is the in-flight limit: a claim made before it and never
	// answered belongs to an attempt that cannot be running any more (its
	// replica died, or its request ran out of time), and is taken over.
	StaleBefore time.Time
}

// KeyState is what a claim found, and what its caller does next.
type KeyState int

// The results of a claim.
const (
	// KeyClaimed: the key was new. The caller holds it: it runs the
	// request, then records the answer (or releases the key).
	KeyClaimed KeyState = iota
	// KeyTakenOver: the key was held by an attempt older than the
	// in-flight limit, which is given up for lost. The caller holds it now,
	// as after KeyClaimed; the earlier attempt may or may not have done its
	// work, so the request must be safe to run again.
	KeyTakenOver
	// KeyReplay: the request was answered. The caller gives Reply again and
	// does nothing else.
	KeyReplay
	// KeyInFlight: another attempt of the same request holds the key and
	// may still be running. The caller answers that it is in progress.
	KeyInFlight
	// KeyReused: the key was first used for another request (another
	// fingerprint). The caller refuses the request.
	KeyReused
)

// String is the state's name, as a metric label.
func (s KeyState) String() string {
	switch s {
	case KeyClaimed:
		return "claimed"
	case KeyTakenOver:
		return "taken_over"
	case KeyReplay:
		return "replay"
	case KeyInFlight:
		return "in_flight"
	case KeyReused:
		return "reused"
	}
	return "unknown"
}

// KeyStates lists every KeyState, so that counters can start at zero.
var KeyStates = []KeyState{KeyClaimed, KeyTakenOver, KeyReplay, KeyInFlight, KeyReused}

// KeyRecord is the result of a claim.
type KeyRecord struct {
	State KeyState
	// Attempt identifies the caller's hold on the key (KeyClaimed,
	// KeyTakenOver): recording the answer, or releasing the key, takes
	// effect only while the attempt still holds it.
	Attempt string
	// Reply is the answer to give again (KeyReplay).
	Reply Reply
}

// Reply is an answer kept under a key, as the API gave it: its status, the
// headers worth repeating, and the body, byte for byte.
type Reply struct {
	Status int
	Header map[string]string
	Body   []byte
}

// ErrKeyLost means an attempt no longer holds its key: a retry took it over
// once the in-flight limit had passed. Its answer is not recorded; the
// answer of the attempt that took over will be.
var ErrKeyLost = errors.New("idempotency key: no longer held by this attempt")

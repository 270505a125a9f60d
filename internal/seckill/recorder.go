package seckill

import (
	"errors"
	"time"
)

// Outcome classifies how a purchase ended, for counting.
type Outcome string

// The outcomes of a purchase. OutcomeFenceRejected is a kind of busy that
// is counted apart: it is the fence doing its job.
const (
	OutcomeCreated          Outcome = "created"
	OutcomeSoldOut          Outcome = "sold_out"
	OutcomeAlreadyPurchased Outcome = "already_purchased"
	OutcomeBusy             Outcome = "busy"
	OutcomeFenceRejected    Outcome = "fence_rejected"
	OutcomeNotFound         Outcome = "not_found"
	OutcomeInvalid          Outcome = "invalid"
	OutcomeError            Outcome = "error"
)

// Outcomes lists every Outcome, so that counters can start at zero.
var Outcomes = []Outcome{
	OutcomeCreated, OutcomeSoldOut, OutcomeAlreadyPurchased, OutcomeBusy,
	OutcomeFenceRejected, OutcomeNotFound, OutcomeInvalid, OutcomeError,
}

// OutcomeOf classifies the error Purchase returned.
func OutcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeCreated
	case errors.Is(err, ErrFenceRejected): // before ErrBusy, which it matches
		return OutcomeFenceRejected
	case errors.Is(err, ErrBusy):
		return OutcomeBusy
	case errors.Is(err, ErrSoldOut):
		return OutcomeSoldOut
	case errors.Is(err, ErrAlreadyPurchased):
		return OutcomeAlreadyPurchased
	case errors.Is(err, ErrNotFound):
		return OutcomeNotFound
	case errors.Is(err, ErrInvalid):
		return OutcomeInvalid
	default:
		return OutcomeError
	}
}

// FenceStage says which write a fence refused.
type FenceStage string

// The fenced writes.
const (
	FenceClaim FenceStage = "claim" // step 4: a newer token was already stored
	FenceWrite FenceStage = "write" // step 6 or a restock: the fence moved on
)

// Recorder is told how purchases end, so that the process can count them.
// The domain does not know how counting is done; internal/metrics
// implements it. Methods must be fast and safe for concurrent use.
type Recorder interface {
	// PurchaseDone is called once per Purchase call.
	PurchaseDone(outcome Outcome, took time.Duration)
	// FenceRejected is called for every write a fence refused, from a
	// purchase or a restock.
	FenceRejected(stage FenceStage)
	// BatchDone is called for every batch served under one lock hold, with
	// the number of purchases in it.
	BatchDone(size int)
	// OrdersClosed is called for every move of orders out of pending: n
	// orders went to state (one for a payment or a cancel, every order an
	// expiry round moved for an expiry).
	OrdersClosed(state OrderState, n int)
	// ExpiriesInProgress is called with +n when an expiry of the locked
	// design holds the locks of n products with due orders and has not
	// yet written them back on sale, and with -n once that write has
	// returned, whatever its outcome (the unlocked control: between its
	// read of the product and its write of the stock). What it counts is
	// what a replica killed or stalled mid-expiry leaves behind it: locks
	// held until their lease runs out, and a write the fence must refuse.
	ExpiriesInProgress(n int)
}

type nopRecorder struct{}

func (nopRecorder) OrdersClosed(OrderState, int) {}
func (nopRecorder) ExpiriesInProgress(int)       {}

func (nopRecorder) PurchaseDone(Outcome, time.Duration) {}
func (nopRecorder) FenceRejected(FenceStage)            {}
func (nopRecorder) BatchDone(int)                       {}

package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// After the sale: the wait for the expiry to return what lapsed, and the
// close-out that buys what came back (Life.CloseOut).

// pollEvery is how often a wait reads the products.
const pollEvery = 50 * time.Millisecond

// waitExpiry reads the products until none has a unit reserved, up to the
// latest window's end plus Lag.
func (l *lives) waitExpiry(products []Product, w io.Writer) {
	a := l.apis[0]
	l.mu.Lock()
	bound := l.lastDue.Add(l.cfg.Lag)
	l.mu.Unlock()
	start := time.Now()
	reserved, err := l.reservedNow(a, products)
	for err == nil && reserved > 0 && time.Now().Before(bound) {
		if !sleepCtx(l.ctx, pollEvery) {
			return
		}
		reserved, err = l.reservedNow(a, products)
	}
	switch {
	case err != nil:
		l.waited = fmt.Sprintf("the wait for the expiry could not read the products: %v", err)
	case reserved > 0:
		l.waited = fmt.Sprintf("%d unit(s) still reserved %v after the last window ended, past the lag's bound (%v)",
			reserved, round(time.Since(l.lastDue)), l.cfg.Lag)
	case time.Now().After(l.lastDue):
		l.waited = fmt.Sprintf("nothing reserved %v after the last window ended (waited %v)",
			round(time.Since(l.lastDue)), round(time.Since(start)))
	default:
		l.waited = fmt.Sprintf("nothing reserved, every order paid or closed before the last window ended (waited %v)", round(time.Since(start)))
	}
	fmt.Fprintf(w, "loadtest: after the sale, %s\n", l.waited)
}

// reservedNow is the units reserved over the products: one read for one
// product, a list of them all for several.
func (l *lives) reservedNow(a api, products []Product) (int64, error) {
	if len(products) == 1 {
		p, err := a.Product(l.ctx, products[0].ID)
		return p.Reserved, err
	}
	mine := make(map[int64]bool, len(products))
	for _, p := range products {
		mine[p.ID] = true
	}
	all, err := a.Products(l.ctx)
	var n int64
	for _, p := range all {
		if mine[p.ID] {
			n += max(0, p.Reserved)
		}
	}
	return n, err
}

// sleepCtx waits d, or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// closeOut sends fresh buyers, each paying at once, to buy what is left
// of each product of hot, a few products at a time, until it has nothing
// available nor reserved. Each product gets at most twice its supply in
// purchases (and a few more), within a window and a lag past the
// close-out's start, plus the request timeout.
func (l *lives) closeOut(hot []Product, w io.Writer) {
	if len(hot) == 0 {
		return
	}
	l.mu.Lock()
	deadline := time.Now().Add(l.window + l.cfg.Lag)
	l.mu.Unlock()
	var mu sync.Mutex
	bought := 0
	_ = forEach(l.ctx, len(hot), func(ctx context.Context, i int) error {
		co := l.closeOne(ctx, hot[i], i, deadline)
		mu.Lock()
		defer mu.Unlock()
		l.closing[hot[i].ID] = co
		bought += co.paid
		return nil
	})
	fmt.Fprintf(w, "loadtest: close-out: %d unit(s) bought and paid for what came back of %d product(s)\n", bought, len(hot))
}

// closeOne closes product p out: read it; buy and pay while it has a
// unit available; wait while units are reserved; stop when it has
// neither, or past deadline or its purchases' bound.
func (l *lives) closeOne(ctx context.Context, p Product, k int, deadline time.Time) *closeOut {
	co := &closeOut{createdByUser: map[string]int{}}
	a := l.apis[k%len(l.apis)]
	for tries := int64(0); tries < 2*supply(p)+8 && time.Now().Before(deadline) && ctx.Err() == nil; {
		call := time.Now()
		now, err := a.Product(ctx, p.ID)
		if err != nil {
			return co
		}
		l.hist.productOp(OpRead, a.Base, call, time.Now(), nil, now)
		switch {
		case now.Stock > 0:
			tries++
			l.buyAndPay(ctx, a, p.ID, co)
		case now.Reserved > 0:
			if !sleepCtx(ctx, pollEvery) {
				return co
			}
		default:
			return co
		}
	}
	return co
}

// buyAndPay is one close-out buyer: a purchase by a fresh user of the
// run, and its payment at once when it made an order.
func (l *lives) buyAndPay(ctx context.Context, a api, product int64, co *closeOut) {
	l.mu.Lock()
	user := fmt.Sprintf("%sc%d", l.prefix, l.closers)
	l.closers++
	l.mu.Unlock()
	call := time.Now()
	o, err := a.Purchase(ctx, product, user)
	res := l.hist.purchase(product, user, a.Base, call, time.Now(), o, err)
	switch {
	case err == nil:
		co.created++
		co.createdByUser[user]++
	case res == ResultAmbiguous:
		co.unknown++
	}
	if err != nil || o.State != StatePending {
		return
	}
	call = time.Now()
	_, err = a.Pay(ctx, o.ID, user)
	res = l.hist.move(OpPay, o, a.Base, call, time.Now(), err)
	m := Move{Kind: OpPay, Product: product, Order: o.ID, Status: http.StatusOK, Call: call, Due: o.ExpiresAt}
	if apiErr, ok := errors.AsType[*APIError](err); ok {
		m.Status, m.Code = apiErr.Status, apiErr.Code
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answers["close-out pay "+moveKey(err)]++
	if res == ResultOK {
		l.moves[product] = append(l.moves[product], m)
	}
	if err == nil {
		co.paid++
	}
}

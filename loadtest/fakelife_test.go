package loadtest

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// fakeLife is the fake shop's reservations (docs/reservations.md), just
// what the load test sees of them: with a window, a purchase reserves, the
// buyer pays or cancels within it, and the shop expires what is left every
// expireEvery, one mutex guarding everything, so that a correct shop is
// simply correct. Two of the service's controls can be switched on.
type fakeLife struct {
	window, expireEvery time.Duration
	// payLate accepts a payment after the window, also of an expired
	// order (UNSAFE_PAY_LATE).
	payLate bool
	// unchecked expires every due order, whatever its state
	// (UNSAFE_EXPIRY=unchecked).
	unchecked bool
}

// reserve makes a pending order of user for p. The caller holds s.mu and
// has checked that p has stock and user holds no live order.
func (s *fakeShop) reserve(p *fakeProduct, user string) Order {
	now := time.Now().UTC()
	s.nextOrder++
	o := &Order{ID: s.nextOrder, ProductID: p.ID, UserID: user, CreatedAt: now, State: StatePending, ExpiresAt: now.Add(s.life.window)}
	p.orders = append(p.orders, o)
	s.orders[o.ID] = o
	p.users[user] = true
	p.Stock--
	p.Reserved++
	return *o
}

// move is POST /api/v1/orders/{id}/pay (to paid) or /cancel (to
// cancelled).
func (s *fakeShop) move(w http.ResponseWriter, r *http.Request, to string) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	var in struct {
		UserID string `json:"user_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.UserID == "" {
		writeError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.orders[id]
	switch {
	case o == nil:
		writeError(w, http.StatusNotFound, "not_found")
		return
	case o.UserID != in.UserID:
		writeError(w, http.StatusForbidden, "not_your_order")
		return
	}
	p := s.products[o.ProductID]
	now := time.Now().UTC()
	late := !now.Before(o.ExpiresAt)
	switch {
	case to == StatePaid && s.life.payLate && (o.State == StatePending || o.State == StateExpired):
		if o.State == StatePending {
			p.Reserved--
		}
		p.Sold++
	case o.State != StatePending:
		writeError(w, http.StatusConflict, "order_"+o.State)
		return
	case late:
		writeError(w, http.StatusConflict, codeOrderExpired)
		return
	case to == StatePaid:
		p.Reserved--
		p.Sold++
	default:
		p.Reserved--
		p.Stock++
		delete(p.users, o.UserID)
	}
	o.State, o.ClosedAt = to, now
	writeJSON(w, http.StatusOK, map[string]Order{"order": *o})
}

// startExpiry expires due orders every expireEvery until the test ends,
// when the shop has a window.
func (s *fakeShop) startExpiry(t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.life.window == 0 || s.expiring {
		return
	}
	s.expiring = true
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(s.life.expireEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			s.expire()
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
	})
}

// expire moves the due pending orders (with unchecked, every due order)
// to expired, their units back on sale, as one step per round.
func (s *fakeShop) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now().UTC()
	for _, p := range s.products {
		for _, o := range p.orders {
			if o.ExpiresAt.After(now) || (o.State != StatePending && !s.life.unchecked) {
				continue
			}
			o.State = StateExpired
			if o.ClosedAt.IsZero() {
				o.ClosedAt = now
			}
			p.Reserved--
			p.Stock++
			delete(p.users, o.UserID)
		}
	}
}

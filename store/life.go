package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// The statements of an order's life after the purchase (docs/reservations.md):
// a payment, a cancel and an expiry each move orders out of pending with a
// conditional update (WHERE state = 'pending'), in the transaction that
// moves their units, so that of two moves that race for one order the
// database lets one through. Cancels and expiries put units back in the
// stock, so they write only under the product's fence; a payment moves a
// unit from reserved to sold, which no purchase writes back, so it needs
// no fence.
//
// Every transaction here, like a purchase's write, locks the product's row
// before its orders' rows, so that two of them never wait for each other
// on PostgreSQL (a deadlock there aborts one of them). On SQLite each is
// one writer of the whole file.

// Order returns one order, or an error matching seckill.ErrOrderNotFound.
func (s *Store) Order(ctx context.Context, id int64) (*seckill.Order, error) {
	return orderByID(s.db.WithContext(ctx), id)
}

// orderByID reads one order through db, which may be a transaction.
func orderByID(db *gorm.DB, id int64) (*seckill.Order, error) {
	var rows []orderRow
	if err := db.Where("id = ?", id).Limit(1).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("store: order %d: %w", id, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("store: order %d: %w", id, seckill.ErrOrderNotFound)
	}
	return rows[0].order(), nil
}

// moveOrder is the conditional update of every move out of pending: it
// matches only an order still pending whose window has not ended at now.
const moveOrder = "UPDATE orders SET state = ?, closed_at = ? WHERE id = ? AND state = 'pending' AND expires_at > ?"

// PayOrders moves each pending order of its user to paid, and its unit
// from the product's reserved count to its sold count, all in one
// transaction, for the orders whose window has not ended at now
// (seckill.CheckMove's rule, checked again by the update itself); the
// others change nothing and get their rule's error in errs. The payments
// of one process are written together (package seckill's shared
// payments): one transaction for many, where one each made a hot
// product's row the sale's bottleneck. err is a failure of the whole
// call, which then writes nothing.
func (s *Store) PayOrders(ctx context.Context, pays []seckill.Payment, now time.Time) (orders []*seckill.Order, errs []error, err error) {
	return s.payOrders(ctx, pays, now, true)
}

// payOrders is PayOrders, and with count false PayOrderRows: the orders
// move and the products' rows are locked all the same, but their reserved
// and sold counts are left alone.
func (s *Store) payOrders(ctx context.Context, pays []seckill.Payment, now time.Time, count bool) (orders []*seckill.Order, errs []error, err error) {
	now = now.UTC()
	err = s.transaction(ctx, func(tx *gorm.DB) error {
		orders, errs = make([]*seckill.Order, len(pays)), make([]error, len(pays))
		ids := make([]int64, len(pays))
		for i, p := range pays {
			ids[i] = p.OrderID
		}
		found, err := ordersByID(tx, ids)
		if err != nil {
			return err
		}
		// The rule, in order: of two payments of one order in the batch,
		// the first that may pays and the second finds it paid.
		var move []int64
		var products []int64
		payer := map[int64]int{} // order -> the payment that moves it
		for i, p := range pays {
			o := found[p.OrderID]
			switch {
			case o == nil:
				errs[i] = fmt.Errorf("order %d: %w", p.OrderID, seckill.ErrOrderNotFound)
				continue
			case payer[o.ID] > 0:
				if o.UserID == p.UserID {
					errs[i] = fmt.Errorf("order %d: %w", o.ID, seckill.ErrOrderPaid)
				} else {
					errs[i] = fmt.Errorf("order %d: %w", o.ID, seckill.ErrNotYourOrder)
				}
				continue
			}
			if errs[i] = seckill.CheckMove(o, p.UserID, now); errs[i] != nil {
				continue
			}
			payer[o.ID] = i + 1
			move = append(move, o.ID)
			if !slices.Contains(products, o.ProductID) {
				products = append(products, o.ProductID)
			}
		}
		if len(move) == 0 {
			return nil
		}
		slices.Sort(products)
		if err := s.lockProducts(tx, products); err != nil {
			return err
		}
		var moved []struct{ ID, ProductID int64 }
		if err := tx.Raw(`UPDATE orders SET state = 'paid', closed_at = ? WHERE id IN ? AND state = 'pending' AND expires_at > ?
			RETURNING id, product_id`, now, move, now).Scan(&moved).Error; err != nil {
			return err
		}
		perProduct := map[int64]int{}
		done := map[int64]bool{}
		for _, m := range moved {
			perProduct[m.ProductID]++
			done[m.ID] = true
		}
		for _, id := range products {
			if n := perProduct[id]; n > 0 && count {
				if err := tx.Exec("UPDATE products SET reserved = reserved - ?, sold = sold + ? WHERE id = ?", n, n, id).Error; err != nil {
					return err
				}
			}
		}
		// An order moved by another transaction since the read: say how.
		var raced []int64
		for _, id := range move {
			if !done[id] {
				raced = append(raced, id)
			}
		}
		again := map[int64]*seckill.Order{}
		if len(raced) > 0 {
			if again, err = ordersByID(tx, raced); err != nil {
				return err
			}
		}
		for id, k := range payer {
			i := k - 1
			o := found[id]
			if done[id] {
				o.State, o.ClosedAt = seckill.OrderPaid, now
				orders[i] = o
				continue
			}
			if errs[i] = seckill.CheckMove(again[id], pays[i].UserID, now); errs[i] == nil {
				errs[i] = fmt.Errorf("order %d did not move to paid", id)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store: pay %d orders: %w", len(pays), err)
	}
	return orders, errs, nil
}

// lockProducts locks the rows of products, in id order, for the rest of
// tx: every transaction that moves orders out of pending locks their
// products' rows first, so that two of them never wait for each other
// (PostgreSQL; on SQLite the transaction holds the file's write lock).
func (s *Store) lockProducts(tx *gorm.DB, ids []int64) error {
	if s.db.Dialector.Name() != "postgres" || len(ids) == 0 {
		return nil
	}
	return tx.Exec("SELECT id FROM products WHERE id IN ? ORDER BY id FOR UPDATE", ids).Error
}

// ordersByID reads the orders ids through db, which may be a transaction.
func ordersByID(db *gorm.DB, ids []int64) (map[int64]*seckill.Order, error) {
	var rows []orderRow
	if err := db.Where("id IN ?", ids).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("store: %d orders: %w", len(ids), err)
	}
	out := make(map[int64]*seckill.Order, len(rows))
	for _, r := range rows {
		out[r.ID] = r.order()
	}
	return out, nil
}

// CancelOrder moves a pending order of userID to cancelled, and its unit
// from the product's reserved count back to its stock, in one transaction,
// only while the product's fence is at most token: the claim and the write
// of one holder (a stale holder, whose token is below the fence, writes
// nothing: seckill.ErrFenceRejected).
func (s *Store) CancelOrder(ctx context.Context, id int64, userID string, token int64, now time.Time) (*seckill.Order, error) {
	return s.move(ctx, id, userID, now, seckill.OrderCancelled, func(tx *gorm.DB, o *seckill.Order) error {
		res := tx.Exec("UPDATE products SET fence = ?, stock = stock + 1, reserved = reserved - 1 WHERE id = ? AND fence <= ?", token, o.ProductID, token)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("cancel order %d under fence %d: %w", id, token, seckill.ErrFenceRejected)
		}
		return nil
	})
}

// move is a payment or a cancel: in one transaction, it reads the order,
// checks the rule, runs unit (the product's update, which locks its row),
// and then moves the order if it is still pending and on time. If the
// order moved meanwhile, it reads it again to say why, and rolls back.
func (s *Store) move(ctx context.Context, id int64, userID string, now time.Time, to seckill.OrderState, unit func(tx *gorm.DB, o *seckill.Order) error) (*seckill.Order, error) {
	now = now.UTC()
	var out *seckill.Order
	err := s.transaction(ctx, func(tx *gorm.DB) error {
		o, err := orderByID(tx, id)
		if err != nil {
			return err
		}
		if err := seckill.CheckMove(o, userID, now); err != nil {
			return err
		}
		if err := unit(tx, o); err != nil {
			return err
		}
		res := tx.Exec(moveOrder, string(to), now, id, now)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			// Moved by another transaction since the read: say how.
			if o, err = orderByID(tx, id); err != nil {
				return err
			}
			if err := seckill.CheckMove(o, userID, now); err != nil {
				return err
			}
			return fmt.Errorf("order %d did not move to %s", id, to)
		}
		o.State, o.ClosedAt = to, now
		out = o
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: %s order %d of user %q: %w", to, id, userID, err)
	}
	return out, nil
}

// DueProducts returns the products with pending orders whose window ended
// by now, those due longest first, at most limit: one scan of the index of
// pending orders' windows, up to now.
func (s *Store) DueProducts(ctx context.Context, now time.Time, limit int) ([]int64, error) {
	var ids []int64
	err := s.db.WithContext(ctx).Raw(`SELECT product_id FROM orders WHERE state = 'pending' AND expires_at <= ?
		GROUP BY product_id ORDER BY MIN(expires_at) LIMIT ?`, now.UTC(), limit).Scan(&ids).Error
	if err != nil {
		return nil, fmt.Errorf("store: products with orders due by %v: %w", now, err)
	}
	return ids, nil
}

// ExpireAll, in one transaction, claims each product's fence with its
// token (only if the fence is at most the token), moves the product's
// pending orders due by now to expired, and adds their number to its
// stock and takes it from its reserved count. A product whose fence is
// past its token is left alone, with an error matching
// seckill.ErrFenceRejected in refused. The claim and the write are one:
// an expiry reads nothing it writes back, it adds to the stock what it
// took from reserved. It returns the ids of each product's expired orders.
func (s *Store) ExpireAll(ctx context.Context, claims []seckill.Claim, now time.Time) ([][]int64, []error, error) {
	return s.expireAll(ctx, claims, now, expireDue)
}

// ExpireAllUnchecked is ExpireAll without the state condition: the control
// of an expiry that does not check the state it moves from
// (seckill.UnsafeLifeStore).
func (s *Store) ExpireAllUnchecked(ctx context.Context, claims []seckill.Claim, now time.Time) ([][]int64, []error, error) {
	return s.expireAll(ctx, claims, now, expireDueAnyState)
}

// The moves of an expiry: of the pending orders due, or (a control) of
// every order due, whatever its state.
const (
	expireDue         = "UPDATE orders SET state = 'expired' WHERE product_id = ? AND state = 'pending' AND expires_at <= ? RETURNING id"
	expireDueAnyState = "UPDATE orders SET state = 'expired' WHERE product_id = ? AND expires_at <= ? RETURNING id"
)

func (s *Store) expireAll(ctx context.Context, claims []seckill.Claim, now time.Time, move string) ([][]int64, []error, error) {
	now = now.UTC()
	expired := make([][]int64, len(claims))
	refused := make([]error, len(claims))
	err := s.transaction(ctx, func(tx *gorm.DB) error {
		for _, i := range byProductID(claims, func(c seckill.Claim) int64 { return c.ProductID }) {
			c := claims[i]
			expired[i], refused[i] = nil, nil
			res := tx.Exec("UPDATE products SET fence = ? WHERE id = ? AND fence <= ?", c.Token, c.ProductID, c.Token)
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected == 0 {
				refused[i] = fmt.Errorf("store: expire the orders of product %d under fence %d: %w", c.ProductID, c.Token, seckill.ErrFenceRejected)
				continue
			}
			var ids []int64
			if err := tx.Raw(move, c.ProductID, now).Scan(&ids).Error; err != nil {
				return err
			}
			if len(ids) == 0 {
				continue
			}
			if err := tx.Exec("UPDATE products SET stock = stock + ?, reserved = reserved - ? WHERE id = ?", len(ids), len(ids), c.ProductID).Error; err != nil {
				return err
			}
			expired[i] = ids
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store: expire the orders of %d products due by %v: %w", len(claims), now, err)
	}
	return expired, refused, nil
}

// expireDueOrders is the move of an expiry with no fence, which returns
// each order's user too.
const expireDueOrders = "UPDATE orders SET state = 'expired' WHERE product_id = ? AND state = 'pending' AND expires_at <= ? RETURNING id, user_id"

// expireUnfenced is the expiry of the designs without a lock: in one
// transaction, it locks the products' rows, in id order, then moves each
// product's pending orders due by now to expired; with count, it also
// adds their number to the product's stock and takes it from its reserved
// count, a relative update under the row's lock. It claims no fence:
// nothing it writes is a value read earlier, and of two expiries that
// race, the second finds the orders no longer pending (on PostgreSQL its
// update waits for the first's row locks and then sees their commit). It
// returns each product's expired orders.
func (s *Store) expireUnfenced(ctx context.Context, productIDs []int64, now time.Time, count bool) ([][]*seckill.Order, error) {
	now = now.UTC()
	expired := make([][]*seckill.Order, len(productIDs))
	err := s.transaction(ctx, func(tx *gorm.DB) error {
		order := byProductID(productIDs, func(id int64) int64 { return id })
		sorted := make([]int64, len(order))
		for k, i := range order {
			sorted[k] = productIDs[i]
		}
		if err := s.lockProducts(tx, sorted); err != nil {
			return err
		}
		for _, i := range order {
			id := productIDs[i]
			expired[i] = nil
			var rows []struct {
				ID     int64
				UserID string
			}
			if err := tx.Raw(expireDueOrders, id, now).Scan(&rows).Error; err != nil {
				return err
			}
			if len(rows) == 0 {
				continue
			}
			if count {
				if err := tx.Exec("UPDATE products SET stock = stock + ?, reserved = reserved - ? WHERE id = ?", len(rows), len(rows), id).Error; err != nil {
					return err
				}
			}
			for _, r := range rows {
				expired[i] = append(expired[i], &seckill.Order{ID: r.ID, ProductID: id, UserID: r.UserID, State: seckill.OrderExpired})
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: expire the orders of %d products due by %v: %w", len(productIDs), now, err)
	}
	return expired, nil
}

// ExpireOrders moves the product's pending orders due by now to expired,
// and takes them from its reserved count only: the first half of the
// unlocked expiry's control (seckill.UnsafeLifeStore), which writes the
// stock back itself.
func (s *Store) ExpireOrders(ctx context.Context, productID int64, now time.Time) ([]int64, error) {
	var ids []int64
	err := s.transaction(ctx, func(tx *gorm.DB) error {
		if err := tx.Raw(expireDue, productID, now.UTC()).Scan(&ids).Error; err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		return tx.Exec("UPDATE products SET reserved = reserved - ? WHERE id = ?", len(ids), productID).Error
	})
	if err != nil {
		return nil, fmt.Errorf("store: expire the orders of product %d due by %v: %w", productID, now, err)
	}
	return ids, nil
}

// PayLate accepts a payment of a pending or expired order of userID,
// whatever its window: the control of the payment that arrives after the
// timeout returned its unit (seckill.UnsafeLifeStore). An expired order's
// unit is counted sold again.
func (s *Store) PayLate(ctx context.Context, id int64, userID string, now time.Time) (*seckill.Order, error) {
	now = now.UTC()
	var out *seckill.Order
	err := s.transaction(ctx, func(tx *gorm.DB) error {
		o, err := orderByID(tx, id)
		if err != nil {
			return err
		}
		if o.UserID != userID {
			return seckill.ErrNotYourOrder
		}
		unit := "UPDATE products SET reserved = reserved - 1, sold = sold + 1 WHERE id = ?"
		switch o.State {
		case seckill.OrderPending:
		case seckill.OrderExpired:
			unit = "UPDATE products SET sold = sold + 1 WHERE id = ?"
		default:
			return seckill.CheckMove(o, userID, now)
		}
		if err := tx.Exec(unit, o.ProductID).Error; err != nil {
			return err
		}
		if err := tx.Exec("UPDATE orders SET state = 'paid', closed_at = ? WHERE id = ?", now, id).Error; err != nil {
			return err
		}
		o.State, o.ClosedAt = seckill.OrderPaid, now
		out = o
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: pay order %d of user %q late: %w", id, userID, err)
	}
	return out, nil
}

// markChunk bounds the ids of one MarkClosed statement: each is a bound
// parameter.
const markChunk = 500

// MarkClosed records at as the closed_at of the expired orders ids that
// have none yet.
func (s *Store) MarkClosed(ctx context.Context, ids []int64, at time.Time) error {
	at = at.UTC()
	var errs []error
	for len(ids) > 0 {
		n := min(len(ids), markChunk)
		if _, err := s.exec(ctx, "UPDATE orders SET closed_at = ? WHERE id IN ? AND state = 'expired' AND closed_at IS NULL", at, ids[:n]); err != nil {
			errs = append(errs, err)
		}
		ids = ids[n:]
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("store: record when orders expired: %w", err)
	}
	return nil
}

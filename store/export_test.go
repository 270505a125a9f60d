package store

import (
	"fmt"
	"strings"

	"gorm.io/gorm"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// SetBeforeCommit makes PlaceOrders call f inside its transaction, after
// its last statement and before the commit, so that a test can hold the
// transaction's locks while another connection runs into them.
func SetBeforeCommit(s *Store, f func()) { s.beforeCommit = f }

// Tx is a transaction on a store's database that a test keeps open, to
// hold the locks of the store's own statements at a moment of its choice.
type Tx struct{ tx *gorm.DB }

// Begin starts a transaction on one of s's connections.
func Begin(s *Store) (*Tx, error) {
	tx := s.db.Begin()
	return &Tx{tx: tx}, tx.Error
}

// ClaimFence runs ClaimFence's statement in the transaction.
func (t *Tx) ClaimFence(productID, token int64) error {
	res := t.tx.Exec(claimFence, token, productID, token)
	if res.Error == nil && res.RowsAffected == 0 {
		return seckill.ErrFenceRejected
	}
	return res.Error
}

// InsertOrder inserts o in the transaction, as PlaceOrders does.
func (t *Tx) InsertOrder(o *seckill.Order) error { return insertOrders(t.tx, []*seckill.Order{o}) }

// Commit commits the transaction.
func (t *Tx) Commit() error { return t.tx.Commit().Error }

// Rollback rolls the transaction back.
func (t *Tx) Rollback() error { return t.tx.Rollback().Error }

// MaxOpenConns is the size of s's connection pool.
func MaxOpenConns(s *Store) int {
	sqlDB, _ := s.db.DB()
	return sqlDB.Stats().MaxOpenConnections
}

// DefaultIsolation is the default_transaction_isolation of s's
// connections (PostgreSQL only).
func DefaultIsolation(s *Store) (string, error) {
	var level string
	err := s.db.Raw("SHOW default_transaction_isolation").Scan(&level).Error
	return level, err
}

// Lookup is a statement that looks a buyer's orders up, with arguments
// for a product and its users.
type Lookup struct {
	Name string
	SQL  string
	Args func(productID int64, users []string) []any
}

// BuyerLookups are the statements with which the store asks PostgreSQL
// whether buyers have an order, as the server gets them.
var BuyerLookups = []Lookup{
	{"Buyers", pgBuyers, func(id int64, users []string) []any { return []any{id, users} }},
	{"HasOrder", numbered(hasOrderSQL), func(id int64, users []string) []any { return []any{id, users[0]} }},
}

// numbered replaces the ? placeholders of query by $1, $2, ..., as GORM
// does for PostgreSQL.
func numbered(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

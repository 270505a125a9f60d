package seckill

import (
	"context"
	"time"
)

// Store keeps products and orders. Package store implements it over
// SQLite or PostgreSQL; every statement lives there. Reading a product, and a page of its
// orders by cursor, costs the same however many orders it has. Lookups of a missing product return
// an error matching ErrNotFound; an order that would be a user's second for
// a product returns one matching ErrAlreadyPurchased (a unique index, so
// the database refuses it even if a check was skipped).
type Store interface {
	// CreateProduct inserts p and sets p.ID.
	CreateProduct(ctx context.Context, p *Product) error
	// Product returns one product with its Sold count and Fence.
	Product(ctx context.Context, id int64) (*Product, error)
	// Products returns every product, by id.
	Products(ctx context.Context) ([]*Product, error)
	// ProductsByID returns the products with these ids, by id, in one
	// read whose cost grows with len(ids), not with the number of
	// products; an id with no product is left out.
	ProductsByID(ctx context.Context, ids []int64) ([]*Product, error)
	// Inventory sums every product but those whose ids are in except, in
	// one read, so that a caller that read those by id can count every
	// product once.
	Inventory(ctx context.Context, except []int64) (Inventory, error)
	// HasOrder reports whether userID holds a live (pending or paid)
	// order for the product. Every lookup of buyers below means live
	// orders: a user whose order was cancelled or expired may buy again.
	HasOrder(ctx context.Context, productID int64, userID string) (bool, error)
	// Buyers returns which of userIDs have an order for the product.
	Buyers(ctx context.Context, productID int64, userIDs []string) (map[string]bool, error)
	// ProductAndBuyers returns what Product and Buyers do, read at one
	// moment (the fast path of step 2): a buyer's order can leave pending,
	// so a stock read before such a move and buyers read after it would
	// answer sold out to a buyer who at no moment both held no order and
	// found none left.
	ProductAndBuyers(ctx context.Context, productID int64, userIDs []string) (*Product, map[string]bool, error)
	// ProductsAndBuyers is ProductAndBuyers for several products at once,
	// in one round trip: the shared reads of the buyers of any products
	// (reads.go). A product that does not exist is missing from products.
	ProductsAndBuyers(ctx context.Context, want []BuyersOf) (products map[int64]*Product, bought map[int64]map[string]bool, err error)
	// Orders returns a page of a product's orders, oldest first.
	Orders(ctx context.Context, productID int64, q OrderQuery) (*OrderList, error)

	// ClaimFence stores token as the product's fence if it is larger than
	// the fence stored, and returns ErrFenceRejected otherwise (step 4).
	ClaimFence(ctx context.Context, productID, token int64) error
	// ClaimAndRead claims the fence as ClaimFence does and then, only if
	// the claim succeeded, returns what Product and Buyers do, read after
	// the claim (steps 4 and 5 as one call, so that a database a network
	// hop away can take them in one round trip).
	ClaimAndRead(ctx context.Context, productID, token int64, userIDs []string) (*Product, map[string]bool, error)
	// PlaceOrders, in one transaction, sets the product's stock to
	// newStock, adds its pending orders to its Reserved and its paid ones
	// to its Sold, and inserts the orders (each with its State and
	// ExpiresAt), all only while the product's fence equals token;
	// otherwise it writes nothing and returns ErrFenceRejected (step 6).
	// It sets the orders' ids.
	PlaceOrders(ctx context.Context, productID, token, newStock int64, orders []*Order) error
	// ClaimAndReadAll is ClaimAndRead for several products at once, in
	// one round trip, each claim with its own token: the group commit
	// across products (commit.go). A refused claim is that product's
	// alone (its Claimed.Err matches ErrFenceRejected, and nothing of it
	// is read); err is a failure of the whole call.
	ClaimAndReadAll(ctx context.Context, claims []Claim) ([]Claimed, error)
	// PlaceOrdersAll is PlaceOrders for several products in one
	// transaction: each product's write happens only while its fence
	// equals its token. A product whose fence moved on writes nothing
	// (its error matches ErrFenceRejected) and the others are written all
	// the same; so does a product one of whose orders the unique index
	// refuses (an order another writer inserted since the read: its error
	// matches ErrAlreadyPurchased, and says nothing of which buyer). err
	// is a failure of the whole call, which then writes nothing.
	PlaceOrdersAll(ctx context.Context, ps []Placement) (refused []error, err error)
	// SetStockFenced, in one transaction, sets the product's stock while
	// its fence equals token and returns the product as that write left
	// it; otherwise it writes nothing and returns ErrFenceRejected (a
	// restock under the lock).
	SetStockFenced(ctx context.Context, productID, stock, token int64) (*Product, error)

	// Order returns one order, or an error matching ErrOrderNotFound.
	Order(ctx context.Context, id int64) (*Order, error)
	// PayOrders, in one transaction, moves each payment's order of its
	// user from pending to paid, only if its window has not ended at
	// now, and its product's unit from reserved to sold; it records now
	// as the order's ClosedAt and returns the orders as they left it.
	// Payments that may not (errs[i] matching ErrOrderNotFound,
	// ErrNotYourOrder, ErrOrderPaid, ErrOrderCancelled or ErrOrderExpired,
	// also for an order still pending whose window has ended) change
	// nothing. err is a failure of the whole call, which writes nothing.
	PayOrders(ctx context.Context, pays []Payment, now time.Time) (orders []*Order, errs []error, err error)
	// CancelOrder moves order id of userID from pending to cancelled, as
	// PayOrders moves one to paid (with its errors), and its unit from
	// reserved back to the product's stock, and so happens only while
	// the product's fence is at most token (a claim and a write of one
	// holder); otherwise ErrFenceRejected, and nothing changed.
	CancelOrder(ctx context.Context, id int64, userID string, token int64, now time.Time) (*Order, error)
	// DueProducts returns the ids of products with pending orders whose
	// window ended by now, those due longest first, at most limit.
	DueProducts(ctx context.Context, now time.Time, limit int) ([]int64, error)
	// ExpireAll, in one transaction, moves each product's pending orders
	// whose window ended by now to expired, and their units from reserved
	// back to the stock, each product only while its fence equals its
	// claim's token. It returns the ids of the orders each product
	// expired; a product whose fence moved on expires nothing, and its
	// error in refused matches ErrFenceRejected. err is a failure of the
	// whole call, which then writes nothing.
	ExpireAll(ctx context.Context, claims []Claim, now time.Time) (expired [][]int64, refused []error, err error)
	// MarkClosed records at as the ClosedAt of the expired orders ids:
	// once their expiry has committed, so that at is an upper bound of
	// when their units came back.
	MarkClosed(ctx context.Context, ids []int64, at time.Time) error

	// Ping reports whether the database answers, for readiness.
	Ping(ctx context.Context) error
}

// Payment is one payment of PayOrders: an order, and the user who pays.
type Payment struct {
	OrderID int64
	UserID  string
}

// BuyersOf is a product and the users whose orders for it a read looks up.
type BuyersOf struct {
	ProductID int64
	UserIDs   []string
}

// Claim is one product of a ClaimAndReadAll: the token of its lock, and
// the users whose orders for it to read after the claim.
type Claim struct {
	ProductID, Token int64
	UserIDs          []string
}

// Claimed is what one claim of a ClaimAndReadAll read: the product and
// which of the users have an order for it, or why the claim was refused.
type Claimed struct {
	Product *Product
	Bought  map[string]bool
	Err     error
}

// Placement is one product's write of a PlaceOrdersAll: its stock after
// the orders, and the orders, under its lock's token.
type Placement struct {
	ProductID, Token, NewStock int64
	Orders                     []*Order
}

// UnfencedStore is the write path of the unfenced modes (Options.Unfenced)
// only: the control modes that show the unfenced sequence overselling.
// The fenced path never uses it; a Service holds one only when built
// unfenced, taken from its Store.
type UnfencedStore interface {
	// InsertOrder inserts o and adds one to the product's Sold (Reserved,
	// for a pending order), with no condition, and sets o.ID (the
	// unfenced sequence's insert).
	InsertOrder(ctx context.Context, o *Order) error
	// SetStock sets the product's stock with no condition (the unfenced
	// sequence's write-back).
	SetStock(ctx context.Context, productID, stock int64) error
}

// UnsafeLifeStore is the write path of the controls of a reservation's
// life (Options.UnsafeExpiry, Options.UnsafePayLate): each leaves out one
// safeguard of Store's, to show what it prevents. A Service holds one only
// when built with such a control.
type UnsafeLifeStore interface {
	// ExpireAllUnchecked is ExpireAll whose move of the orders checks no
	// state: every order of the product whose window ended by now
	// becomes expired, paid, cancelled and expired ones too, and each
	// adds a unit to the stock.
	ExpireAllUnchecked(ctx context.Context, claims []Claim, now time.Time) (expired [][]int64, refused []error, err error)
	// ExpireOrders moves the product's pending orders due by now to
	// expired and takes them from its reserved count, and nothing else:
	// the stock is left to the caller (an unlocked expiry writes it back
	// with SetStock).
	ExpireOrders(ctx context.Context, productID int64, now time.Time) ([]int64, error)
	// PayLate is PayOrder without the window or the state: it accepts a
	// payment of a pending or expired order of userID at any time; an
	// expired order's unit, already back on sale, is counted sold again.
	PayLate(ctx context.Context, id int64, userID string, now time.Time) (*Order, error)
}

// ConditionalStore is the Store of the conditional design, where the
// database alone decides a purchase.
type ConditionalStore interface {
	Store
	// BuyConditionally sells one item in one transaction: it takes one
	// from the product's stock only while the stock is above zero, adds
	// one to its Sold and inserts o. With no stock left it writes nothing
	// and returns ErrAlreadyPurchased if the user has an order, else
	// ErrSoldOut; a second order of the user is refused by the unique
	// index (ErrAlreadyPurchased), rolling the decrement back. It sets
	// o.ID.
	BuyConditionally(ctx context.Context, o *Order) error
	// Restock, in one transaction, sets the product's stock and returns
	// the product as that write left it.
	Restock(ctx context.Context, productID, stock int64) (*Product, error)
	// CancelConditionally moves order id of userID from pending to
	// cancelled, as PayOrders moves one to paid (with its errors), and
	// its unit from reserved back to the product's stock, in one
	// transaction, with no fence: the stock is added to, never written
	// as a value read.
	CancelConditionally(ctx context.Context, id int64, userID string, now time.Time) (*Order, error)
	// ExpireConditionally, in one transaction, moves each product's
	// pending orders whose window ended by now to expired, and their
	// units from reserved back to the stock, with no fence, and returns
	// the ids of each product's expired orders. err is a failure of the
	// whole call, which then writes nothing.
	ExpireConditionally(ctx context.Context, productIDs []int64, now time.Time) ([][]int64, error)
}

// CounterStore is the Store of the counter designs, where a counter in
// Redis decides a purchase and the database keeps the orders and the
// supply the counter is built from (Supply).
type CounterStore interface {
	Store
	// Supply reads, in one statement, what a product's counter is built
	// from: the stock and sold count recorded by its creation or its
	// last restock, that restock's generation, and the orders there are
	// now. It returns an error matching ErrNotFound for a missing product.
	Supply(ctx context.Context, productID int64) (Supply, error)
	// RecordRestock records a restock's counter as the product's supply,
	// only if its generation is newer than the one recorded, so that of
	// two racing restocks the newer one stays. It reports whether it
	// wrote.
	RecordRestock(ctx context.Context, productID int64, c Count) (bool, error)
	// AddOrder inserts o, and nothing else, and sets o.ID. A second
	// order of the user for the product returns an error matching
	// ErrAlreadyPurchased.
	AddOrder(ctx context.Context, o *Order) error
	// WriteOrders inserts the orders in one transaction, skipping those
	// whose user already has an order for the product, so that writing
	// the same orders twice writes them once. It returns how many it
	// inserted.
	WriteOrders(ctx context.Context, orders []*Order) (int, error)

	// The moves of a reservation's life with the orders alone: the
	// counter, not the product's row, keeps the units' counts.

	// OrdersByID returns the orders ids, by id; an id with no order is
	// left out.
	OrdersByID(ctx context.Context, ids []int64) (map[int64]*Order, error)
	// PayOrderRows is PayOrders that leaves the products' counts alone.
	PayOrderRows(ctx context.Context, pays []Payment, now time.Time) (orders []*Order, errs []error, err error)
	// CancelOrderRow is ConditionalStore.CancelConditionally that leaves
	// the product's counts alone.
	CancelOrderRow(ctx context.Context, id int64, userID string, now time.Time) (*Order, error)
	// ExpireOrderRows is ConditionalStore.ExpireConditionally that
	// leaves the products' counts alone, and returns each product's
	// expired orders, with their users.
	ExpireOrderRows(ctx context.Context, productIDs []int64, now time.Time) ([][]*Order, error)
}

package handlers

import (
	"context"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// purchase: POST /api/v1/products/:id/purchase.
func (a *api) purchase(c *gin.Context) {
	id, err := pathID(c)
	if err != nil {
		a.fail(c, err)
		return
	}
	var req purchaseRequest
	if err := bindJSON(c, &req); err != nil {
		a.bodyError(c, err)
		return
	}
	if req.UserID == nil {
		a.fail(c, required("user_id"))
		return
	}
	a.once(c, *req.UserID, id, req, func() {
		o, err := a.svc.Purchase(c.Request.Context(), id, *req.UserID)
		if err != nil {
			a.fail(c, err)
			return
		}
		c.JSON(http.StatusCreated, gin.H{"order": toOrderJSON(o)})
	})
}

// listOrders: GET /api/v1/products/:id/orders?limit=&after= (or the
// older &offset=; see seckill.OrderQuery for what each costs).
func (a *api) listOrders(c *gin.Context) {
	id, err := pathID(c)
	if err != nil {
		a.fail(c, err)
		return
	}
	var q seckill.OrderQuery
	q.Limit, err = queryInt(c, "limit", seckill.DefaultOrderLimit,
		"must be an integer from 1 to "+strconv.Itoa(seckill.MaxOrderLimit))
	if err != nil {
		a.fail(c, err)
		return
	}
	q.Offset, err = queryInt(c, "offset", 0, "must be a non-negative integer")
	if err != nil {
		a.fail(c, err)
		return
	}
	_, q.Cursor = c.GetQuery("after")
	q.After, err = queryID(c, "after")
	if err != nil {
		a.fail(c, err)
		return
	}
	list, err := a.svc.Orders(c.Request.Context(), id, q)
	if err != nil {
		a.fail(c, err)
		return
	}
	orders := make([]orderJSON, len(list.Orders))
	for i, o := range list.Orders {
		orders[i] = toOrderJSON(o)
	}
	out := orderListJSON{ProductID: list.ProductID, Count: list.Count, Orders: orders}
	if list.Next != 0 {
		out.Next = &list.Next
	}
	c.JSON(http.StatusOK, out)
}

// getOrder: GET /api/v1/orders/:id.
func (a *api) getOrder(c *gin.Context) {
	id, err := pathID(c)
	if err != nil {
		a.fail(c, err)
		return
	}
	o, err := a.svc.Order(c.Request.Context(), id)
	if err != nil {
		a.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"order": toOrderJSON(o)})
}

// payOrder: POST /api/v1/orders/:id/pay.
func (a *api) payOrder(c *gin.Context) { a.moveOrder(c, a.svc.Pay) }

// cancelOrder: POST /api/v1/orders/:id/cancel.
func (a *api) cancelOrder(c *gin.Context) { a.moveOrder(c, a.svc.Cancel) }

// moveOrder is a payment or a cancel: the order in the path, the buyer in
// the body, as in a purchase.
func (a *api) moveOrder(c *gin.Context, move func(ctx context.Context, orderID int64, userID string) (*seckill.Order, error)) {
	id, err := pathID(c)
	if err != nil {
		a.fail(c, err)
		return
	}
	var req purchaseRequest
	if err := bindJSON(c, &req); err != nil {
		a.bodyError(c, err)
		return
	}
	if req.UserID == nil {
		a.fail(c, required("user_id"))
		return
	}
	a.once(c, *req.UserID, id, req, func() {
		o, err := move(c.Request.Context(), id, *req.UserID)
		if err != nil {
			a.fail(c, err)
			return
		}
		c.JSON(http.StatusOK, gin.H{"order": toOrderJSON(o)})
	})
}

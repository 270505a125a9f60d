package handlers

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// createProduct: POST /api/v1/products (admin).
func (a *api) createProduct(c *gin.Context) {
	var req createProductRequest
	if err := bindJSON(c, &req); err != nil {
		a.bodyError(c, err)
		return
	}
	switch {
	case req.Name == nil:
		a.fail(c, required("name"))
		return
	case req.Stock == nil:
		a.fail(c, required("stock"))
		return
	}
	p, err := a.svc.CreateProduct(c.Request.Context(), *req.Name, *req.Stock)
	if err != nil {
		a.fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, toProductJSON(p))
}

// listProducts: GET /api/v1/products.
func (a *api) listProducts(c *gin.Context) {
	products, err := a.svc.Products(c.Request.Context())
	if err != nil {
		a.fail(c, err)
		return
	}
	out := make([]productJSON, len(products))
	for i, p := range products {
		out[i] = toProductJSON(p)
	}
	c.JSON(http.StatusOK, gin.H{"products": out})
}

// getProduct: GET /api/v1/products/:id.
func (a *api) getProduct(c *gin.Context) {
	id, err := pathID(c)
	if err != nil {
		a.fail(c, err)
		return
	}
	p, err := a.svc.Product(c.Request.Context(), id)
	if err != nil {
		a.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, toProductJSON(p))
}

// restock: PUT /api/v1/products/:id/stock (admin).
func (a *api) restock(c *gin.Context) {
	id, err := pathID(c)
	if err != nil {
		a.fail(c, err)
		return
	}
	var req restockRequest
	if err := bindJSON(c, &req); err != nil {
		a.bodyError(c, err)
		return
	}
	if req.Stock == nil {
		a.fail(c, required("stock"))
		return
	}
	p, err := a.svc.Restock(c.Request.Context(), id, *req.Stock)
	if err != nil {
		a.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, toProductJSON(p))
}

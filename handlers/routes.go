package handlers

import "github.com/gin-gonic/gin"

// routes is the whole API, in one table.
func (a *api) routes(e *gin.Engine) {
	e.GET("/healthz", a.healthz)
	e.GET("/readyz", a.readyz)
	e.GET("/metrics", a.metricsPage)
	if a.dashboard != nil {
		e.GET("/dashboard", a.dashboardPage)
		e.GET("/dashboard/data", a.dashboardData)
	}

	v1 := e.Group("/api/v1")
	v1.GET("/products", a.listProducts)
	v1.GET("/products/:id", a.getProduct)
	v1.POST("/products/:id/purchase", a.purchase)
	v1.GET("/products/:id/orders", a.listOrders)
	v1.GET("/orders/:id", a.getOrder)
	v1.POST("/orders/:id/pay", a.payOrder)
	v1.POST("/orders/:id/cancel", a.cancelOrder)

	admin := v1.Group("", a.requireAdmin)
	admin.POST("/products", a.createProduct)
	admin.PUT("/products/:id/stock", a.restock)

	e.NoRoute(a.notFound)
	e.NoMethod(a.methodNotAllowed)
}

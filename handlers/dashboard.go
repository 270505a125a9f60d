package handlers

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// dashboardPage: GET /dashboard, the live sale page.
func (a *api) dashboardPage(c *gin.Context) {
	// The page is in the binary and changes with it; a stale copy in a
	// browser cache would poll a data format it does not know.
	c.Header("Cache-Control", "no-cache")
	c.Data(http.StatusOK, "text/html; charset=utf-8", a.dashboard.Page())
}

// dashboardData: GET /dashboard/data?since=<unix seconds>, what the page
// shows. Without since, the whole window the dashboard keeps.
func (a *api) dashboardData(c *gin.Context) {
	var since time.Time
	if s := c.Query("since"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			a.fail(c, seckill.Invalid("since", "must be a time in Unix seconds, 0 or more"))
			return
		}
		since = time.Unix(n, 0)
	}
	data, err := a.dashboard.Data(c.Request.Context(), since)
	if err != nil {
		a.fail(c, err)
		return
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, data)
}

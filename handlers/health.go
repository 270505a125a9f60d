package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// readyTimeout bounds a readiness check, so that a hung dependency makes
// the probe fail rather than hang.
const readyTimeout = 2 * time.Second

// healthz: GET /healthz. The process is up; it checks nothing else, so
// that a slow database does not get a live process restarted.
func (a *api) healthz(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"status": "ok"})
}

// readyz: GET /readyz. Ready when Redis and the database answer.
func (a *api) readyz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), readyTimeout)
	defer cancel()
	if err := a.svc.Ready(ctx); err != nil {
		a.log.WarnContext(ctx, "not ready", "err", err)
		abort(c, http.StatusServiceUnavailable, codeNotReady, "a dependency (the database or Redis) is not answering; see the server log")
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready"})
}

// metricsPage: GET /metrics, in the Prometheus text format (or another
// format the scraper asks for).
func (a *api) metricsPage(c *gin.Context) {
	if a.metrics == nil {
		c.Data(http.StatusOK, "text/plain; version=0.0.4; charset=utf-8", nil)
		return
	}
	a.metrics.ServeHTTP(c.Writer, c.Request)
}

package handlers

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// recoverer turns a panic in a handler into a JSON 500 and a log entry with
// the stack, instead of a dropped connection.
func (a *api) recoverer() gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			r := recover()
			if r == nil {
				return
			}
			if r == http.ErrAbortHandler {
				panic(r) // net/http's way to abort a response; not a bug
			}
			a.log.ErrorContext(c.Request.Context(), "panic",
				"method", c.Request.Method, "path", c.Request.URL.Path,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			if !c.Writer.Written() {
				abort(c, http.StatusInternalServerError, codeInternal, "something went wrong on our side")
			}
		}()
		c.Next()
	}
}

// countRequests tells the RequestObserver about each request, labelled by
// the route's pattern (c.FullPath) rather than the path: one series per
// route, however many products there are. It runs first, so that it also
// sees the 500 the recoverer writes after a panic.
func (a *api) countRequests() gin.HandlerFunc {
	return func(c *gin.Context) {
		if a.requests == nil {
			c.Next()
			return
		}
		start := time.Now()
		c.Next()
		a.requests.RequestDone(c.Request.Method, c.FullPath(), c.Writer.Status(), time.Since(start))
	}
}

// requestLog is Gin's request log, written through slog so that it has the
// same format and level control as every other log line.
func (a *api) requestLog() gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		status := c.Writer.Status()
		level := slog.LevelInfo
		if status >= http.StatusInternalServerError {
			level = slog.LevelError
		}
		a.log.Log(c.Request.Context(), level, "request",
			"method", c.Request.Method,
			"path", c.Request.URL.Path,
			"status", status,
			"duration", time.Since(start),
			"bytes", c.Writer.Size(),
			"client", c.ClientIP())
	}
}

// limitBody answers 413 for a declared body over max and makes reading past
// max fail for an undeclared (chunked) one; bind turns that failure into a
// 413 as well.
func limitBody(max int64) gin.HandlerFunc {
	return func(c *gin.Context) {
		if c.Request.ContentLength > max {
			abort(c, http.StatusRequestEntityTooLarge, codeTooLarge,
				fmt.Sprintf("the request body must be at most %d bytes", max))
			return
		}
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, max)
		c.Next()
	}
}

// requireAdmin lets through requests with "Authorization: Bearer <token>".
// Both tokens are hashed before the constant-time comparison, so that the
// comparison takes the same time whatever the lengths, and the time taken
// says nothing about the token.
func (a *api) requireAdmin(c *gin.Context) {
	got, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	gotSum := sha256.Sum256([]byte(got))
	wantSum := sha256.Sum256([]byte(a.token))
	if subtle.ConstantTimeCompare(gotSum[:], wantSum[:]) != 1 || !ok {
		c.Header("WWW-Authenticate", `Bearer realm="seckill admin"`)
		abort(c, http.StatusUnauthorized, codeUnauthorized, "this call needs the header Authorization: Bearer followed by the admin token")
		return
	}
	c.Next()
}

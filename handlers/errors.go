package handlers

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// Error codes of the API: the "error" field of every error body.
const (
	codeInvalid          = "invalid_request"
	codeUnauthorized     = "unauthorized"
	codeNotFound         = "not_found"
	codeMethod           = "method_not_allowed"
	codeTooLarge         = "request_too_large"
	codeTimeout          = "request_timeout"
	codeSoldOut          = "sold_out"
	codeAlreadyPurchased = "already_purchased"
	codeNotYourOrder     = "not_your_order"
	codeOrderPaid        = "order_paid"
	codeOrderCancelled   = "order_cancelled"
	codeOrderExpired     = "order_expired"
	codeBusy             = "busy"
	codeKeyReused        = "idempotency_key_reused"
	codeInProgress       = "request_in_progress"
	codeKeysUnsupported  = "idempotency_unsupported"
	codeNotReady         = "not_ready"
	codeInternal         = "internal_error"
)

// errorBody is the body of every error response.
type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// domainErrors maps the domain's sentinels to responses, in one place. The
// first match wins. The message is fixed text: wrapped errors carry product
// ids and SQL context meant for the log, not for the client. Invalid input
// is the exception, below: its message names the field and the rule.
var domainErrors = []struct {
	err     error
	status  int
	code    string
	message string
}{
	{seckill.ErrInvalid, http.StatusBadRequest, codeInvalid, "the request is invalid"},
	{seckill.ErrOrderNotFound, http.StatusNotFound, codeNotFound, "no such order"}, // before ErrNotFound, which it matches
	{seckill.ErrNotFound, http.StatusNotFound, codeNotFound, "no such product"},
	{seckill.ErrNotYourOrder, http.StatusForbidden, codeNotYourOrder, "this order belongs to another user"},
	{seckill.ErrOrderPaid, http.StatusConflict, codeOrderPaid, "the order is paid already"},
	{seckill.ErrOrderCancelled, http.StatusConflict, codeOrderCancelled, "the order was cancelled"},
	{seckill.ErrOrderExpired, http.StatusConflict, codeOrderExpired, "the order's payment window has passed; nothing was taken"},
	{seckill.ErrSoldOut, http.StatusConflict, codeSoldOut, "the product is sold out"},
	{seckill.ErrAlreadyPurchased, http.StatusConflict, codeAlreadyPurchased, "this user has already bought this product"},
	{seckill.ErrBusy, http.StatusServiceUnavailable, codeBusy, "too many buyers at once; try again shortly"},
}

// fail answers with the response err maps to. An error it does not know is
// a 500 with a generic message; the detail goes to the log.
func (a *api) fail(c *gin.Context, err error) {
	var inv *seckill.InvalidError
	if errors.As(err, &inv) {
		abort(c, http.StatusBadRequest, codeInvalid, inv.Error())
		return
	}
	for _, m := range domainErrors {
		if errors.Is(err, m.err) {
			if m.status == http.StatusServiceUnavailable {
				c.Header("Retry-After", RetryAfterSeconds)
			}
			abort(c, m.status, m.code, m.message)
			return
		}
	}
	a.log.ErrorContext(c.Request.Context(), "request failed",
		"method", c.Request.Method, "path", c.Request.URL.Path, "err", err)
	abort(c, http.StatusInternalServerError, codeInternal, "something went wrong on our side")
}

// abort writes an error body and stops the handler chain.
func abort(c *gin.Context, status int, code, message string) {
	c.AbortWithStatusJSON(status, errorBody{Error: code, Message: message})
}

func (a *api) notFound(c *gin.Context) {
	abort(c, http.StatusNotFound, codeNotFound, "no route for "+c.Request.URL.Path)
}

// methodNotAllowed keeps the Allow header Gin has set.
func (a *api) methodNotAllowed(c *gin.Context) {
	abort(c, http.StatusMethodNotAllowed, codeMethod, c.Request.Method+" is not allowed here")
}

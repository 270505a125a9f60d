package handlers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// Idempotency keys: the Idempotency-Key header of
// draft-ietf-httpapi-idempotency-key-header on purchase, pay and cancel.
// A request that carries one is done at most once per user and key; the
// record of each key is in the database every replica shares
// (IdempotencyStore), so a retry may reach any replica. The request's
// fingerprint is its method, route, path parameter and body as bound (the
// values, not the bytes: a retry whose JSON is spaced or ordered
// differently is the same request). Each case, and why, is in
// docs/reservations.md.

// The headers of the protocol.
const (
	// IdempotencyKeyHeader carries the client's key.
	IdempotencyKeyHeader = "Idempotency-Key"
	// ReplayedHeader marks an answer given again from a key's record.
	ReplayedHeader = "Idempotent-Replayed"
)

// keptHeaders are the headers of an answer recorded with it and given
// again; the others (Date, Content-Length) belong to each response.
var keptHeaders = []string{"Content-Type", "Retry-After"}

// keyWriteTimeout bounds recording an answer or releasing a key, which
// runs even when the client has gone: a client whose connection dropped is
// the one that will retry.
const keyWriteTimeout = 5 * time.Second

// once runs do, the work of a request whose user is userID, at most once
// per user and Idempotency-Key; without the header, it runs do. params and
// body are the request's path parameter and bound body, for its
// fingerprint. It is called once the request is known to be valid, since
// the key's scope (the user) is in the body.
func (a *api) once(c *gin.Context, userID string, params, body any, do func()) {
	key, ok, err := idempotencyKey(c.Request.Header)
	switch {
	case err != nil:
		a.fail(c, err)
		return
	case !ok:
		do()
		return
	case a.keys.Store == nil:
		abort(c, http.StatusNotImplemented, codeKeysUnsupported, "this server does not keep idempotency keys; send the request without "+IdempotencyKeyHeader)
		return
	}
	// The store's columns hold valid ids only; the service would refuse
	// this one anyway.
	if err := seckill.ValidateUserID(userID); err != nil {
		a.fail(c, err)
		return
	}
	now := time.Now()
	k := seckill.RequestKey{UserID: userID, Key: key}
	rec, err := a.keys.Store.ClaimKey(c.Request.Context(), seckill.KeyClaim{
		RequestKey:  k,
		Fingerprint: fingerprint(c.Request.Method, c.FullPath(), params, body),
		At:          now,
		StaleBefore: now.Add(-a.keys.InFlight),
	})
	if err != nil {
		a.fail(c, err)
		return
	}
	if a.keys.Observer != nil {
		a.keys.Observer.KeyClaimed(rec.State)
	}
	switch rec.State {
	case seckill.KeyReused:
		abort(c, http.StatusUnprocessableEntity, codeKeyReused,
			"this "+IdempotencyKeyHeader+" was first sent with another request (method, path or body); use a new key for a new request")
	case seckill.KeyInFlight:
		c.Header("Retry-After", RetryAfterSeconds)
		abort(c, http.StatusConflict, codeInProgress,
			"a request with this "+IdempotencyKeyHeader+" is still being processed; retry it later to get its answer")
	case seckill.KeyReplay:
		replay(c, rec.Reply)
	default: // KeyClaimed, KeyTakenOver
		a.runClaimed(c, k, rec.Attempt, now.Add(a.keys.InFlight), do)
	}
}

// runClaimed runs do holding k: with its answer held back until it is
// recorded, so that an answer a client has seen is the one its retries get,
// and with the in-flight deadline. An answer that says the server failed
// (5xx: busy, an unknown error, a panic) is not recorded: the key is given
// back and a retry runs the request again, which is safe, since every
// request that takes a key is checked by the domain's rules again
// (one live order per user per product, an order leaves pending once).
func (a *api) runClaimed(c *gin.Context, k seckill.RequestKey, attempt string, deadline time.Time, do func()) {
	out, req := c.Writer, c.Request
	held := &heldWriter{ResponseWriter: out, statusCode: http.StatusOK}
	ctx, cancel := context.WithDeadline(req.Context(), deadline)
	defer cancel()
	c.Writer, c.Request = held, req.WithContext(ctx)
	finished := false
	defer func() {
		c.Writer, c.Request = out, req
		if !finished { // do panicked; the recoverer answers 500
			a.keyWrite(req, "release", func(ctx context.Context) error { return a.keys.Store.ReleaseKey(ctx, k, attempt) })
		}
	}()
	do()
	finished = true
	c.Writer, c.Request = out, req

	reply := seckill.Reply{Status: held.statusCode, Header: map[string]string{}, Body: held.body.Bytes()}
	for _, name := range keptHeaders {
		if v := out.Header().Get(name); v != "" {
			reply.Header[name] = v
		}
	}
	if reply.Status >= http.StatusInternalServerError {
		a.keyWrite(req, "release", func(ctx context.Context) error { return a.keys.Store.ReleaseKey(ctx, k, attempt) })
	} else {
		a.keyWrite(req, "record the answer", func(ctx context.Context) error { return a.keys.Store.CompleteKey(ctx, k, attempt, reply) })
	}
	out.WriteHeader(reply.Status)
	_, _ = out.Write(reply.Body)
}

// keyWrite runs write, a change of a claimed key, with a context that
// outlives the client's. A failure is logged and the client still gets the
// answer: the work is done. The key then stays in flight until the
// in-flight limit, when a retry takes it over and runs the request again;
// ErrKeyLost means a retry has done that already.
func (a *api) keyWrite(req *http.Request, what string, write func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), keyWriteTimeout)
	defer cancel()
	if err := write(ctx); err != nil {
		a.log.WarnContext(ctx, "idempotency key: "+what, "method", req.Method, "path", req.URL.Path, "err", err)
	}
}

// replay gives a recorded answer again, marked as such.
func replay(c *gin.Context, r seckill.Reply) {
	for name, v := range r.Header {
		c.Header(name, v)
	}
	c.Header(ReplayedHeader, "true")
	c.Status(r.Status)
	_, _ = c.Writer.Write(r.Body)
	c.Abort()
}

// idempotencyKey reads the Idempotency-Key header: false without one. The
// draft makes it a Structured Field string ("..."); a bare key, as many
// clients send it, is accepted too and means the same key. A key is 1 to
// seckill.MaxKeyLength characters of printable ASCII without spaces,
// quotes or backslashes: a UUID fits, and the key needs no escaping in a
// log line. The header must appear once.
func idempotencyKey(h http.Header) (string, bool, error) {
	values := h.Values(IdempotencyKeyHeader)
	switch {
	case len(values) == 0:
		return "", false, nil
	case len(values) > 1:
		return "", false, seckill.Invalid(IdempotencyKeyHeader, "must be sent once, not "+strconv.Itoa(len(values))+" times")
	}
	v := values[0]
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	ok := len(v) >= 1 && len(v) <= seckill.MaxKeyLength
	for i := 0; ok && i < len(v); i++ {
		ok = v[i] > ' ' && v[i] < 0x7f && v[i] != '"' && v[i] != '\\'
	}
	if !ok {
		return "", false, seckill.Invalid(IdempotencyKeyHeader, "must be 1 to "+strconv.Itoa(seckill.MaxKeyLength)+
			` printable ASCII characters without spaces, quotes or backslashes, optionally in double quotes (a UUID is best)`)
	}
	return v, true, nil
}

// fingerprint is the hex SHA-256 of the request as JSON: its method, route
// pattern, path parameter and bound body, in that order.
func fingerprint(method, route string, params, body any) string {
	canonical, err := json.Marshal([]any{method, route, params, body})
	if err != nil {
		// The arguments are ints, strings and the request structs, which
		// always encode.
		panic("handlers: fingerprint: " + err.Error())
	}
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

// heldWriter is a gin.ResponseWriter that keeps the answer instead of
// sending it. Headers go to the real writer's map, which is not sent until
// the answer is.
type heldWriter struct {
	gin.ResponseWriter // the real writer: its header map, and what a handler here never calls
	statusCode         int
	body               bytes.Buffer
	written            bool
}

func (w *heldWriter) WriteHeader(code int) {
	if code > 0 && !w.written {
		w.statusCode = code
	}
}

func (w *heldWriter) WriteHeaderNow() { w.written = true }

func (w *heldWriter) Write(b []byte) (int, error) {
	w.written = true
	return w.body.Write(b)
}

func (w *heldWriter) WriteString(s string) (int, error) {
	w.written = true
	return w.body.WriteString(s)
}

func (w *heldWriter) Status() int   { return w.statusCode }
func (w *heldWriter) Written() bool { return w.written }
func (w *heldWriter) Flush()        {}

func (w *heldWriter) Size() int {
	if !w.written {
		return -1
	}
	return w.body.Len()
}

package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// bindJSON decodes the request body into dst like Gin's ShouldBindJSON,
// but stricter, and with errors a client can act on: unknown fields are
// refused (a misspelt "stok" must not silently mean "stock: 0"), the body
// must hold exactly one JSON object, no key may appear twice in an object
// (see duplicateKey), and every failure names the field. It does not use
// Gin's binding package because that package switches
// DisallowUnknownFields on for the whole process, not per call. The error
// is an *seckill.InvalidError, an *http.MaxBytesError for an oversized
// body, or a *bodyReadError when the body could not be read (the
// server's read timeout, a client gone).
func bindJSON(c *gin.Context, dst any) error {
	// The body is read whole (limitBody bounds it) because the duplicate
	// check needs a second pass.
	data, err := io.ReadAll(c.Request.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return err
		}
		return &bodyReadError{err: err}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return seckill.Invalid("body", "must hold a single JSON object and nothing after it")
	}
	if path, again, dup := duplicateKey(data); dup {
		problem := "appears more than once; send each field once"
		if last := path[strings.LastIndexAny(path, ".]")+1:]; again != last {
			problem = fmt.Sprintf("appears more than once (again as %q, which names the same field); send each field once", again)
		}
		return seckill.Invalid(path, problem)
	}
	return nil
}

// bodyReadError is a request body that could not be read to its end.
type bodyReadError struct{ err error }

func (e *bodyReadError) Error() string { return "read the request body: " + e.err.Error() }
func (e *bodyReadError) Unwrap() error { return e.err }

// timeout reports whether the server's read deadline cut the body off.
func (e *bodyReadError) timeout() bool {
	var ne net.Error
	return errors.As(e.err, &ne) && ne.Timeout()
}

// jsonError translates encoding/json's errors into field-level messages.
func jsonError(err error) error {
	var (
		syntax   *json.SyntaxError
		typ      *json.UnmarshalTypeError
		tooLarge *http.MaxBytesError
	)
	switch {
	case errors.As(err, &tooLarge):
		return err
	case errors.Is(err, io.EOF):
		return seckill.Invalid("body", "must be a JSON object; it is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return seckill.Invalid("body", "is not valid JSON: it ends too early")
	case errors.As(err, &syntax):
		return seckill.Invalid("body", fmt.Sprintf("is not valid JSON at byte %d", syntax.Offset))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return seckill.Invalid("body", "must be a JSON object, not "+typ.Value)
		}
		return seckill.Invalid(typ.Field, "must be "+kindName(typ.Type.String())+", not "+typ.Value)
	}
	// encoding/json has no type for this one; its text is stable:
	// json: unknown field "name".
	if rest, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if name, uerr := strconv.Unquote(rest); uerr == nil {
			rest = name
		}
		return seckill.Invalid(rest, "is not a known field")
	}
	return seckill.Invalid("body", "could not be read as JSON")
}

// kindName describes a request field's Go type the way a client thinks of
// it.
func kindName(goType string) string {
	switch strings.TrimPrefix(goType, "*") {
	case "int64", "int":
		return "an integer"
	case "string":
		return "a string"
	default:
		return "a " + goType
	}
}

// bodyError answers a bindJSON error.
func (a *api) bodyError(c *gin.Context, err error) {
	var (
		tooLarge *http.MaxBytesError
		readErr  *bodyReadError
	)
	switch {
	case errors.As(err, &tooLarge):
		abort(c, http.StatusRequestEntityTooLarge, codeTooLarge,
			fmt.Sprintf("the request body must be at most %d bytes", tooLarge.Limit))
	case errors.As(err, &readErr) && readErr.timeout():
		// The connection is closed after this answer: its body was not
		// read to the end.
		abort(c, http.StatusRequestTimeout, codeTimeout, "the request body did not arrive in time")
	case errors.As(err, &readErr):
		abort(c, http.StatusBadRequest, codeInvalid, "body: could not be read to its end")
	default:
		a.fail(c, err)
	}
}

// required is the error for a field that is missing or null.
func required(field string) error { return seckill.Invalid(field, "is required") }

// pathID parses the :id path parameter. Only plain decimal digits are
// accepted: "+1", " 1" and "1.0" are not ids.
func pathID(c *gin.Context) (int64, error) {
	id, ok := parseDigits(c.Param("id"))
	if !ok || id <= 0 {
		return 0, seckill.Invalid("id", "must be a positive integer")
	}
	return id, nil
}

// parseDigits parses a non-negative int64 written as plain decimal digits.
func parseDigits(s string) (int64, bool) {
	if s == "" || len(s) > 19 || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// queryID parses an optional query parameter that holds an id or 0: plain
// decimal digits, up to int64's range. Absent, it is 0.
func queryID(c *gin.Context, name string) (int64, error) {
	s, ok := c.GetQuery(name)
	if !ok {
		return 0, nil
	}
	n, ok := parseDigits(s)
	if !ok {
		return 0, seckill.Invalid(name, "must be an order id or 0")
	}
	return n, nil
}

// queryInt parses an optional integer query parameter.
func queryInt(c *gin.Context, name string, def int, problem string) (int, error) {
	s, ok := c.GetQuery(name)
	if !ok {
		return def, nil
	}
	if s == "" || len(s) > 9 || strings.Trim(s, "0123456789") != "" {
		return 0, seckill.Invalid(name, problem)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, seckill.Invalid(name, problem)
	}
	return n, nil
}

package loadtest

import (
	"encoding/json"
	"net/http"
	"strconv"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Error codes of the purchase, pay and cancel endpoints that the report
// and the checker care about.
const (
	codeSoldOut          = "sold_out"
	codeAlreadyPurchased = "already_purchased"
	codeBusy             = "busy"
	codeOrderPaid        = "order_paid"
	codeOrderCancelled   = "order_cancelled"
	codeOrderExpired     = "order_expired"
)

// outcome is what one purchase request came to.
type outcome struct {
	status int    // HTTP status; 0 when no response arrived
	code   string // the body's "error" code; "" for 201 and unparsable bodies
	err    string // the transport error when status is 0
	user   string // the buyer, from the request URL fragment
	repeat bool   // the request reused an earlier buyer
}

// classify reads a Vegeta result. Vegeta fills Result.Error with the status
// text for any status >= 400, so the transport error is only taken when no
// status arrived.
func classify(r *vegeta.Result) outcome {
	o := outcome{status: int(r.Code)}
	o.user, o.repeat = buyerOf(r.URL)
	if o.status == 0 {
		o.err = r.Error
		if o.err == "" {
			o.err = "no response"
		}
		return o
	}
	if o.status != http.StatusCreated {
		var body struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(r.Body, &body) == nil {
			o.code = body.Error
		}
	}
	return o
}

// created reports whether the purchase succeeded.
func (o outcome) created() bool { return o.status == http.StatusCreated }

// unknown reports whether the request may or may not have created an order:
// it got no answer, or a 5xx other than the service's own "busy", which the
// API promises is answered without writing. The checker allows for these.
func (o outcome) unknown() bool {
	return o.status == 0 || (o.status >= 500 && !(o.status == http.StatusServiceUnavailable && o.code == codeBusy))
}

// key names the outcome in the report: "201", "409 sold_out", "503 busy",
// "500" for a body without a code, "error" when nothing came back.
func (o outcome) key() string {
	switch {
	case o.status == 0:
		return "error"
	case o.code == "":
		return strconv.Itoa(o.status)
	default:
		return strconv.Itoa(o.status) + " " + o.code
	}
}

// plotLabel labels Vegeta's HTML plot series by outcome instead of Vegeta's
// OK/ERROR, which would paint every expected 409 as a failure. The plot colours
// labels containing "ERROR" red: only answers that are not part of the API's
// contract get it.
func plotLabel(r *vegeta.Result) string {
	if isRead(r.URL) {
		if r.Code == http.StatusOK {
			return "read"
		}
		return "ERROR read"
	}
	o := classify(r)
	switch {
	case o.created(), o.code == codeSoldOut, o.code == codeAlreadyPurchased, o.code == codeBusy:
		return o.key()
	case o.status == 0:
		return "ERROR (no response)"
	default:
		return "ERROR " + o.key()
	}
}

package loadtest

import (
	"testing"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

func TestClassify(t *testing.T) {
	const u = "http://a/api/v1/products/1/purchase#"
	cases := []struct {
		name    string
		r       vegeta.Result
		key     string
		unknown bool
		user    string
		repeat  bool
		label   string
	}{
		{"created", vegeta.Result{Code: 201, URL: u + "user=lt-1-0", Body: []byte(`{"order":{"id":1}}`)},
			"201", false, "lt-1-0", false, "201"},
		{"sold out", vegeta.Result{Code: 409, URL: u + "user=lt-1-1", Error: "409 Conflict", Body: []byte(`{"error":"sold_out","message":"x"}`)},
			"409 sold_out", false, "lt-1-1", false, "409 sold_out"},
		{"repeat refused", vegeta.Result{Code: 409, URL: u + "repeat=lt-1-0", Body: []byte(`{"error":"already_purchased"}`)},
			"409 already_purchased", false, "lt-1-0", true, "409 already_purchased"},
		{"busy", vegeta.Result{Code: 503, URL: u + "user=lt-1-2", Body: []byte(`{"error":"busy"}`)},
			"503 busy", false, "lt-1-2", false, "503 busy"},
		{"503 from a proxy", vegeta.Result{Code: 503, URL: u + "user=lt-1-3", Body: []byte(`<html>`)},
			"503", true, "lt-1-3", false, "ERROR 503"},
		{"internal error", vegeta.Result{Code: 500, URL: u + "user=lt-1-4", Body: []byte(`{"error":"internal"}`)},
			"500 internal", true, "lt-1-4", false, "ERROR 500 internal"},
		{"bad request", vegeta.Result{Code: 400, URL: u + "user=lt-1-5", Body: []byte(`{"error":"invalid_request"}`)},
			"400 invalid_request", false, "lt-1-5", false, "ERROR 400 invalid_request"},
		{"no answer", vegeta.Result{Code: 0, URL: u + "user=lt-1-6", Error: "dial tcp: connection refused"},
			"error", true, "lt-1-6", false, "ERROR (no response)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := classify(&tc.r)
			if o.key() != tc.key || o.unknown() != tc.unknown || o.user != tc.user || o.repeat != tc.repeat {
				t.Errorf("got key %q unknown %v user %q repeat %v, want %q %v %q %v",
					o.key(), o.unknown(), o.user, o.repeat, tc.key, tc.unknown, tc.user, tc.repeat)
			}
			if got := plotLabel(&tc.r); got != tc.label {
				t.Errorf("got plot label %q, want %q", got, tc.label)
			}
		})
	}
	if o := classify(&vegeta.Result{URL: u + "user=x", Error: "dial tcp: refused"}); o.err != "dial tcp: refused" {
		t.Errorf("got transport error %q, want Vegeta's", o.err)
	}
}

// Package apitest points the API client (internal/apiclient) at an
// http.Handler in the test's own process: each request is served by
// calling the handler, with no listener and no port, so a test of one
// replica's Gin engine speaks to it exactly as the load test and the fault
// suite speak to a real server.
package apitest

import (
	"net/http"
	"net/http/httptest"

	"github.com/seckill-ref/seckill/internal/apiclient"
)

// Client is an API client whose every request is served by h, with the
// admin token token ("" for none).
func Client(h http.Handler, token string) *apiclient.Client {
	return apiclient.New(&http.Client{Transport: Transport{h}}, "http://in-process", token)
}

// Transport is an http.RoundTripper that serves each request with Handler.
type Transport struct{ Handler http.Handler }

// RoundTrip implements http.RoundTripper.
func (t Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	w := httptest.NewRecorder()
	t.Handler.ServeHTTP(w, req)
	resp := w.Result()
	resp.Request = req
	return resp, nil
}

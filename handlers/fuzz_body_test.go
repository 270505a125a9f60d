package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/seckill-ref/seckill/handlers"
	"github.com/seckill-ref/seckill/internal/seckill"
)

// call is what a handler asked the service to do.
type call struct {
	Method string
	ID     int64
	Name   string
	Stock  int64
	UserID string
}

// recordingService accepts everything and records each call, so that the
// values a handler decoded can be compared with the reference decoding.
type recordingService struct{ calls []call }

func (s *recordingService) CreateProduct(_ context.Context, name string, stock int64) (*seckill.Product, error) {
	s.calls = append(s.calls, call{Method: "CreateProduct", Name: name, Stock: stock})
	return &seckill.Product{ID: 1, Name: name, Stock: stock}, nil
}

func (s *recordingService) Restock(_ context.Context, id, stock int64) (*seckill.Product, error) {
	s.calls = append(s.calls, call{Method: "Restock", ID: id, Stock: stock})
	return &seckill.Product{ID: id, Name: "p", Stock: stock}, nil
}

func (s *recordingService) Purchase(_ context.Context, id int64, userID string) (*seckill.Order, error) {
	s.calls = append(s.calls, call{Method: "Purchase", ID: id, UserID: userID})
	return &seckill.Order{ID: 1, ProductID: id, UserID: userID}, nil
}

func (s *recordingService) Product(context.Context, int64) (*seckill.Product, error) {
	return nil, seckill.ErrNotFound
}
func (s *recordingService) Products(context.Context) ([]*seckill.Product, error) { return nil, nil }
func (s *recordingService) Orders(context.Context, int64, seckill.OrderQuery) (*seckill.OrderList, error) {
	return nil, seckill.ErrNotFound
}
func (s *recordingService) Ready(context.Context) error { return nil }
func (s *recordingService) Order(context.Context, int64) (*seckill.Order, error) {
	return nil, seckill.ErrOrderNotFound
}
func (s *recordingService) Pay(_ context.Context, id int64, userID string) (*seckill.Order, error) {
	s.calls = append(s.calls, call{Method: "Pay", ID: id, UserID: userID})
	return &seckill.Order{ID: id, UserID: userID, State: seckill.OrderPaid}, nil
}
func (s *recordingService) Cancel(_ context.Context, id int64, userID string) (*seckill.Order, error) {
	s.calls = append(s.calls, call{Method: "Cancel", ID: id, UserID: userID})
	return &seckill.Order{ID: id, UserID: userID, State: seckill.OrderCancelled}, nil
}

// bodyRoute is a route with a JSON body and its reference decoding: the
// request struct as encoding/json sees it, and the call it must lead to.
type bodyRoute struct {
	method, path string
	status       int             // on success
	newReq       func() any      // a pointer to a fresh request struct
	want         func(any) *call // nil when a required field is missing
}

var bodyRoutes = []bodyRoute{
	{"POST", "/api/v1/products", http.StatusCreated,
		func() any {
			return &struct {
				Name  *string `json:"name"`
				Stock *int64  `json:"stock"`
			}{}
		},
		func(v any) *call {
			r := reflect.ValueOf(v).Elem()
			name, stock := r.Field(0).Interface().(*string), r.Field(1).Interface().(*int64)
			if name == nil || stock == nil {
				return nil
			}
			return &call{Method: "CreateProduct", Name: *name, Stock: *stock}
		}},
	{"POST", "/api/v1/products/7/purchase", http.StatusCreated,
		func() any {
			return &struct {
				UserID *string `json:"user_id"`
			}{}
		},
		func(v any) *call {
			u := reflect.ValueOf(v).Elem().Field(0).Interface().(*string)
			if u == nil {
				return nil
			}
			return &call{Method: "Purchase", ID: 7, UserID: *u}
		}},
	{"PUT", "/api/v1/products/7/stock", http.StatusOK,
		func() any {
			return &struct {
				Stock *int64 `json:"stock"`
			}{}
		},
		func(v any) *call {
			s := reflect.ValueOf(v).Elem().Field(0).Interface().(*int64)
			if s == nil {
				return nil
			}
			return &call{Method: "Restock", ID: 7, Stock: *s}
		}},
	{"POST", "/api/v1/orders/7/pay", http.StatusOK,
		func() any {
			return &struct {
				UserID *string `json:"user_id"`
			}{}
		},
		func(v any) *call {
			u := reflect.ValueOf(v).Elem().Field(0).Interface().(*string)
			if u == nil {
				return nil
			}
			return &call{Method: "Pay", ID: 7, UserID: *u}
		}},
	{"POST", "/api/v1/orders/7/cancel", http.StatusOK,
		func() any {
			return &struct {
				UserID *string `json:"user_id"`
			}{}
		},
		func(v any) *call {
			u := reflect.ValueOf(v).Elem().Field(0).Interface().(*string)
			if u == nil {
				return nil
			}
			return &call{Method: "Cancel", ID: 7, UserID: *u}
		}},
}

// referenceBind is the specification of a valid body, written without the
// handlers' code: the body is one JSON value and nothing else (json.Valid);
// encoding/json with DisallowUnknownFields decodes it into the route's
// struct; no object in it has two keys that encoding/json takes for the
// same name (bytes.EqualFold, pairwise); the required fields are there. It
// returns the call the route must make, or nil and whether the only fault
// is a repeated key.
func referenceBind(r bodyRoute, body []byte) (want *call, onlyDuplicate bool) {
	if len(body) > handlers.MaxBodyBytes || !json.Valid(body) {
		return nil, false
	}
	dst := r.newReq()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return nil, false
	}
	want = r.want(dst)
	if hasRepeatedKey(body) {
		return nil, want != nil
	}
	return want, false
}

// hasRepeatedKey walks the document recursively, value by value.
func hasRepeatedKey(raw []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return false
	}
	switch tok {
	case json.Delim('{'):
		var keys []string
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return false
			}
			key := k.(string)
			for _, prev := range keys {
				if bytes.EqualFold([]byte(prev), []byte(key)) {
					return true
				}
			}
			keys = append(keys, key)
			var v json.RawMessage
			if dec.Decode(&v) != nil {
				return false
			}
			if hasRepeatedKey(v) {
				return true
			}
		}
	case json.Delim('['):
		for dec.More() {
			var v json.RawMessage
			if dec.Decode(&v) != nil {
				return false
			}
			if hasRepeatedKey(v) {
				return true
			}
		}
	}
	return false
}

// FuzzBodyBinding sends body to each route with a JSON body, through the
// Gin engine, and checks the handler against referenceBind: it accepts
// exactly the valid bodies and passes the service exactly the values
// encoding/json decodes; it refuses everything else with 400 or 413 and a
// JSON error, without calling the service; a repeated key is named.
func FuzzBodyBinding(f *testing.F) {
	for _, seed := range []string{
		`{"name":"phone","stock":3}`,
		`{"user_id":"alice"}`,
		`{"stock":10}`,
		`{"user_id":"a","user_id":"b"}`,
		`{"name":"x","NAME":"y","stock":1}`,
		`{"stock":1,"stock":1}`,
		`{"user_id":"a","u` + "\u017f" + `er_id":"b"}`,
		`{"stock":1e3}`,
		`{"stock":-0}`,
		`{"stock":9223372036854775808}`,
		`{"name":"\ud800","stock":0}`,
		`{"name":null,"stock":null}`,
		`{"user_id":"a"} `,
		`{"user_id":"a"}{}`,
		`[]`,
		``,
		`{"a":{"b":1,"b":2}}`,
	} {
		for route := range len(bodyRoutes) {
			f.Add(uint8(route), seed)
		}
	}
	svc := &recordingService{}
	engine := handlers.New(svc, handlers.Options{AdminToken: adminToken})
	f.Fuzz(func(t *testing.T, routeByte uint8, body string) {
		r := bodyRoutes[int(routeByte&0x7f)%len(bodyRoutes)]
		chunked := routeByte&0x80 != 0 // no Content-Length: the limit applies while reading
		svc.calls = svc.calls[:0]
		req := httptest.NewRequest(r.method, r.path, strings.NewReader(body))
		if chunked {
			req.ContentLength = -1
			req.Body = io.NopCloser(strings.NewReader(body))
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+adminToken)
		w := httptest.NewRecorder()
		engine.ServeHTTP(w, req)

		want, onlyDup := referenceBind(r, []byte(body))
		if want != nil {
			if w.Code != r.status || len(svc.calls) != 1 || svc.calls[0] != *want {
				t.Fatalf("%s %s %q: got %d %s and calls %+v; want %d and the call %+v", r.method, r.path, body, w.Code, w.Body, svc.calls, r.status, *want)
			}
			return
		}
		if len(svc.calls) != 0 {
			t.Fatalf("%s %s %q: refused by the reference, but the service was called: %+v (answer %d %s)", r.method, r.path, body, svc.calls, w.Code, w.Body)
		}
		var e struct{ Error, Message string }
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Message == "" {
			t.Fatalf("%s %s %q: got %d %q, want a JSON error body", r.method, r.path, body, w.Code, w.Body)
		}
		switch {
		case w.Code == http.StatusBadRequest && e.Error == "invalid_request":
		case w.Code == http.StatusRequestEntityTooLarge && e.Error == "request_too_large" && len(body) > handlers.MaxBodyBytes:
		default:
			t.Fatalf("%s %s %q: got %d %s, want 400 invalid_request (or 413 when too large)", r.method, r.path, body, w.Code, w.Body)
		}
		if onlyDup && !strings.Contains(e.Message, "appears more than once") {
			t.Fatalf("%s %s %q: a repeated key answered %q, want it named", r.method, r.path, body, e.Message)
		}
	})
}

package handlers_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestDuplicateKeysRefused: a key twice in a body is 400 invalid_request
// naming the field, on every route with a body, and changes nothing. The
// same bodies with the key once succeed, so it is the repetition that is
// refused.
func TestDuplicateKeysRefused(t *testing.T) {
	a := newTestAPI(t)
	a.createProduct("phone", 5)
	for _, tt := range []struct {
		name, method, path, token string
		once, twice               string // the body with the key once, and twice
		field, again              string // the field the message names, and the second spelling
	}{
		{"create: name", "POST", "/api/v1/products", adminToken,
			`{"name":"a","stock":1}`, `{"name":"a","stock":1,"name":"b"}`, "name", ""},
		{"create: stock", "POST", "/api/v1/products", adminToken,
			`{"name":"a","stock":1}`, `{"stock":1,"name":"a","stock":2}`, "stock", ""},
		{"create: same value twice", "POST", "/api/v1/products", adminToken,
			`{"name":"a","stock":1}`, `{"name":"a","name":"a","stock":1}`, "name", ""},
		{"create: other case", "POST", "/api/v1/products", adminToken,
			`{"name":"a","stock":1}`, `{"name":"a","stock":1,"NAME":"b"}`, "name", "NAME"},
		{"purchase: user_id", "POST", "/api/v1/products/1/purchase", "",
			`{"user_id":"a"}`, `{"user_id":"a","user_id":"b"}`, "user_id", ""},
		{"purchase: Unicode fold", "POST", "/api/v1/products/1/purchase", "",
			`{"user_id":"c"}`, `{"user_id":"c","u\u017fer_id":"d"}`, "user_id", "u\u017fer_id"},
		{"restock: stock", "PUT", "/api/v1/products/1/stock", adminToken,
			`{"stock":7}`, `{"stock":7,"stock":0}`, "stock", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a.unchanged(func() {
				res := a.do(request{method: tt.method, path: tt.path, body: tt.twice, token: tt.token})
				wantError(t, res, http.StatusBadRequest, "invalid_request")
				msg, _ := res.json["message"].(string)
				if !strings.HasPrefix(msg, tt.field+": appears more than once") {
					t.Errorf("message: got %q, want it to start with %q", msg, tt.field+": appears more than once")
				}
				if tt.again != "" && !strings.Contains(msg, tt.again) {
					t.Errorf("message: got %q, want it to name the second spelling %q", msg, tt.again)
				}
			})
			if res := a.do(request{method: tt.method, path: tt.path, body: tt.once, token: tt.token}); res.status >= 300 {
				t.Errorf("with the key once: got %d %s, want success", res.status, res.raw)
			}
		})
	}
}

// TestDuplicateKeysReachTheField shows why the case-folded repeats above
// are refused: encoding/json fills the one field with both keys, the last
// winning, so a proxy reading the first would see another user.
func TestDuplicateKeysReachTheField(t *testing.T) {
	for _, body := range []string{
		`{"user_id":"a","user_id":"b"}`,
		`{"user_id":"a","USER_ID":"b"}`,
		`{"user_id":"a","u\u017fer_id":"b"}`, // ſ folds to s
	} {
		var req struct {
			UserID string `json:"user_id"`
		}
		dec := json.NewDecoder(strings.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil || req.UserID != "b" {
			t.Errorf("%s: encoding/json got %q, %v; want \"b\", nil", body, req.UserID, err)
		}
	}
}

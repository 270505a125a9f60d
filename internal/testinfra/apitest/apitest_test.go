package apitest_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/seckill-ref/seckill/internal/apiclient"
	"github.com/seckill-ref/seckill/internal/testinfra/apitest"
)

// The in-process client reaches the handler and brings back its answer,
// errors included.
func TestClientServesThroughTheHandler(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/products", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "unauthorized", "message": "no"})
			return
		}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(apiclient.Product{ID: 9, Name: "x", Stock: 3})
	})
	p, err := apitest.Client(mux, "tok").CreateProduct(t.Context(), "x", 3)
	if err != nil || p.ID != 9 {
		t.Fatalf("got %+v, %v; want product 9", p, err)
	}
	_, err = apitest.Client(mux, "wrong").CreateProduct(t.Context(), "x", 3)
	if e, ok := errors.AsType[*apiclient.Error](err); !ok || e.Status != http.StatusUnauthorized || e.Code != "unauthorized" {
		t.Errorf("got %v, want a 401 unauthorized Error", err)
	}
}

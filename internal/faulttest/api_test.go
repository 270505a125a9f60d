package faulttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const adminToken = "faulttest-admin-token"

// client talks to the replicas for set-up and observation. No proxy from
// the environment: traffic goes to 127.0.0.1 and nowhere else.
var client = &http.Client{
	Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4},
	Timeout:   10 * time.Second,
}

// get returns the status and body of GET url.
func get(ctx context.Context, url string) (int, []byte, error) {
	return do(ctx, http.MethodGet, url, "")
}

// do sends one request with a JSON body (if any) and the admin token.
func do(ctx context.Context, method, url, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	return resp.StatusCode, b, err
}

// product is the API's product.
type product struct {
	ID    int64 `json:"id"`
	Stock int64 `json:"stock"`
	Sold  int64 `json:"sold"`
}

// order is the API's order.
type order struct {
	ID     int64  `json:"id"`
	UserID string `json:"user_id"`
	Fence  int64  `json:"fence"`
}

// createProduct creates a product with stock through r and returns its id.
func createProduct(t *testing.T, r *replica, stock int) int64 {
	t.Helper()
	body := fmt.Sprintf(`{"name":"faulttest %s","stock":%d}`, t.Name(), stock)
	status, b, err := do(t.Context(), http.MethodPost, r.url+"/api/v1/products", body)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("create product: got %d %s (%v), want 201", status, b, err)
	}
	var p product
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("create product: %v in %s", err, b)
	}
	return p.ID
}

// getProduct reads a product through r.
func getProduct(ctx context.Context, r *replica, id int64) (product, error) {
	status, b, err := get(ctx, r.url+"/api/v1/products/"+strconv.FormatInt(id, 10))
	if err != nil {
		return product{}, err
	}
	if status != http.StatusOK {
		return product{}, fmt.Errorf("get product %d from %s: HTTP %d %s", id, r.name, status, b)
	}
	var p product
	return p, json.Unmarshal(b, &p)
}

// allOrders reads every order of a product through r, oldest (lowest id)
// first, page by page with the cursor.
func allOrders(ctx context.Context, r *replica, id int64) ([]order, error) {
	var out []order
	var after int64
	for {
		url := fmt.Sprintf("%s/api/v1/products/%d/orders?limit=1000&after=%d", r.url, id, after)
		status, b, err := get(ctx, url)
		if err != nil {
			return nil, err
		}
		var page struct {
			Orders []order `json:"orders"`
			Next   *int64  `json:"next"`
		}
		if status != http.StatusOK {
			return nil, fmt.Errorf("list orders: HTTP %d %s", status, b)
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, err
		}
		out = append(out, page.Orders...)
		if page.Next == nil {
			return out, nil
		}
		after = *page.Next
	}
}

// metrics is one scrape of a replica's /metrics, read with Prometheus's
// text parser: sample name with its labels (name{label="value"}) to value;
// a histogram gives name_count and name_sum.
type metrics map[string]float64

// Names of the samples the scenarios read (internal/metrics).
const (
	mAcqUncontended  = `seckill_lock_acquisitions_total{contended="false"}`
	mAcqContended    = `seckill_lock_acquisitions_total{contended="true"}`
	mReleases        = `seckill_lock_releases_total`
	mFenceClaim      = `seckill_fence_rejections_total{stage="claim"}`
	mFenceWrite      = `seckill_fence_rejections_total{stage="write"}`
	mLeasesLost      = `seckill_lock_leases_lost_total`
	mRenewalFailures = `seckill_lock_renewal_failures_total`
	mBusy            = `seckill_purchases_total{outcome="busy"}`
)

// acquisitions is how many times the replica has taken a lock.
func (m metrics) acquisitions() float64 { return m[mAcqUncontended] + m[mAcqContended] }

// held is how many locks the replica holds: every Acquire is matched by
// one Release, lost lease or not, so the difference is the purchases
// inside their critical section right now (at most one per product).
func (m metrics) held() float64 { return m.acquisitions() - m[mReleases] }

// fenceRejections is the writes the fence refused, both stages.
func (m metrics) fenceRejections() float64 { return m[mFenceClaim] + m[mFenceWrite] }

// scrape reads r's /metrics.
func scrape(ctx context.Context, r *replica) (metrics, error) {
	status, b, err := get(ctx, r.url+"/metrics")
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("metrics of %s: HTTP %d", r.name, status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("metrics of %s: %w", r.name, err)
	}
	m := metrics{}
	for name, f := range fams {
		for _, s := range f.GetMetric() {
			key := name
			if len(s.GetLabel()) > 0 {
				pairs := make([]string, len(s.GetLabel()))
				for i, l := range s.GetLabel() {
					pairs[i] = fmt.Sprintf("%s=%q", l.GetName(), l.GetValue())
				}
				key += "{" + strings.Join(pairs, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				m[key] = s.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				m[key] = s.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				m[key+"_count"] = float64(s.GetHistogram().GetSampleCount())
				m[key+"_sum"] = s.GetHistogram().GetSampleSum()
			}
		}
	}
	for _, name := range []string{mAcqUncontended, mReleases, mFenceClaim, mLeasesLost, mBusy} {
		if _, ok := m[name]; !ok {
			return nil, fmt.Errorf("metrics of %s: no sample %s (renamed in internal/metrics?)", r.name, name)
		}
	}
	return m, nil
}

// mustScrape is scrape for the test goroutine.
func mustScrape(t *testing.T, r *replica) metrics {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := scrape(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// errTimeout is what poll returns when its context ends first.
var errTimeout = errors.New("condition not met before the deadline")

// poll calls cond every interval until it returns true or an error, or ctx
// ends. Errors from cond end the poll; a cond that cannot tell yet (a
// replica that is not answering) returns false, nil.
func poll(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%v)", errTimeout, context.Cause(ctx))
		case <-t.C:
		}
	}
}

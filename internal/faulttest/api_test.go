package faulttest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/seckill-ref/seckill/internal/apiclient"
)

const adminToken = "faulttest-admin-token"

// client talks to the replicas for set-up and observation. No proxy from
// the environment: traffic goes to 127.0.0.1 and nowhere else.
var client = &http.Client{
	Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4},
	Timeout:   10 * time.Second,
}

// api is a client of r's API, with the admin token.
func (r *replica) api() *apiclient.Client { return apiclient.New(client, r.url, adminToken) }

// get returns the status and body of GET url, for the endpoints that are
// not the JSON API (/metrics, /readyz, /healthz).
func get(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	return resp.StatusCode, b, err
}

// createProduct creates a product with stock through r and returns its id.
func createProduct(t *testing.T, r *replica, stock int) int64 {
	t.Helper()
	p, err := r.api().CreateProduct(t.Context(), "faulttest "+t.Name(), int64(stock))
	if err != nil {
		t.Fatal(err)
	}
	return p.ID
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

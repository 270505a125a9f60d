package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/apiclient"
	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/testinfra/browsertest"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/loadtest"
)

const adminToken = "dashboard-admin-token"

// serveReplicas starts n replicas on one Redis and one SQLite file, each
// serving on its own loopback port until the test ends, and returns their
// base URLs.
func serveReplicas(t *testing.T, n int) []string {
	t.Helper()
	r := redistest.Start(t)
	db := filepath.Join(t.TempDir(), "seckill.db")
	var urls []string
	for range n {
		cfg := app.DefaultConfig()
		cfg.RedisAddr, cfg.Database, cfg.AdminToken = r.Addr(), db, adminToken
		cfg.ShutdownTimeout = 5 * time.Second
		srv, err := app.NewServer(context.Background(), cfg, nil)
		if err != nil {
			t.Fatalf("NewServer: %v", err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ctx, ln); err != nil {
				t.Errorf("serve: %v", err)
			}
		}()
		t.Cleanup(func() {
			cancel()
			wg.Wait()
			_ = srv.Close()
		})
		urls = append(urls, "http://"+ln.Addr().String())
	}
	return urls
}

// apiProduct reads a product through the API, as any client would.
func apiProduct(base string, id int64) (apiclient.Product, error) {
	return apiclient.New(http.DefaultClient, base, "").Product(context.Background(), id)
}

// shown is what the page shows of the selected product.
type shown struct {
	Product    string `json:"product"`
	Stock      string `json:"stock"`
	Sold       string `json:"sold"`
	Polls      int    `json:"polls"`
	Points     int    `json:"points"`     // sold points of the stock chart
	SoldLine   int    `json:"soldLine"`   // points of the sold polyline drawn
	OrderBars  int    `json:"orderBars"`  // orders-per-second bars drawn
	OutcomeBar int    `json:"outcomeBar"` // outcome bars drawn
	Created    int64  `json:"created"`    // 201s in the page's timeline, all replicas
	Scope      string `json:"scope"`
}

const readPage = `(() => {
  const q = id => document.getElementById(id);
  const soldLine = document.querySelector("#chart-stock polyline.sold");
  return {
    product: q("product").value,
    stock: q("stock").dataset.value || "",
    sold: q("sold").dataset.value || "",
    polls: Number(document.body.dataset.polls || 0),
    points: Number(q("chart-stock").dataset.points || 0),
    soldLine: soldLine ? soldLine.getAttribute("points").trim().split(/\s+/).length : 0,
    orderBars: document.querySelectorAll("#chart-orders rect.bar").length,
    outcomeBar: document.querySelectorAll("#chart-outcomes rect.bar").length,
    created: [...state.seconds.values()].reduce((n, s) => n + (s.outcomes.created || 0), 0),
    scope: q("scope").textContent,
  };
})()`

// The dashboard in a real browser, during a sale on two replicas and after
// it: it shows the product's stock and sold as the API has them, draws its
// charts, and counts the purchases of both replicas whichever one serves
// the page.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: headless Chromium")
	}
	urls := serveReplicas(t, 2)
	b := browsertest.Start(t, 1280, 900)
	b.Navigate(urls[0] + "/dashboard")
	b.WaitTrue(`Number(document.body.dataset.polls) >= 1`, 20*time.Second, func() string { return "the page never polled its data" })

	const stock = 300
	type result struct {
		rep loadtest.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		// A steady sale of a few seconds, so that there is a "during".
		rep, err := loadtest.Run(context.Background(), loadtest.Config{
			Targets: urls, AdminToken: adminToken, Stock: stock,
			Rate: 100, Duration: 5 * time.Second, ProgressMode: loadtest.ProgressOff,
		}, io.Discard)
		done <- result{rep, err}
	}()

	// During the sale: wait for the first orders, then check that a poll
	// started after one read of the API and finished before another shows
	// numbers between the two.
	id := int64(1)
	var before apiclient.Product
	poll.Eventually(t, 30*time.Second, "a first order", func() bool {
		p, err := apiProduct(urls[1], id)
		before = p
		return err == nil && p.Sold > 0
	})
	polls := browsertest.Eval[shown](b, readPage).Polls
	b.WaitTrue(fmt.Sprintf(`Number(document.body.dataset.polls) >= %d`, polls+2), 20*time.Second, func() string { return "the page stopped polling" })
	during := browsertest.Eval[shown](b, readPage)
	after, err := apiProduct(urls[1], id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("during the sale: API sold %d, page %+v, API sold %d", before.Sold, during, after.Sold)
	if before.Sold >= stock {
		t.Fatalf("the sale was over before the check (sold %d): nothing was seen during it", before.Sold)
	}
	var shownStock, shownSold int64
	if _, err := fmt.Sscan(during.Stock, &shownStock); err != nil {
		t.Fatalf("stock shown: %q", during.Stock)
	}
	if _, err := fmt.Sscan(during.Sold, &shownSold); err != nil {
		t.Fatalf("sold shown: %q", during.Sold)
	}
	if during.Product != "1" || shownSold < before.Sold || shownSold > after.Sold || shownStock+shownSold != stock {
		t.Errorf("during the sale the page shows product %s with stock %d, sold %d; want product 1 with sold in [%d, %d] and stock + sold = %d",
			during.Product, shownStock, shownSold, before.Sold, after.Sold, stock)
	}
	b.Screenshot(browsertest.ScreenshotPath(t, "dashboard-during.png"))

	res := <-done
	if res.err != nil || !res.rep.OK() {
		t.Fatalf("the sale: %v, %s", res.err, res.rep.Verdict())
	}
	final, err := apiProduct(urls[1], id)
	if err != nil {
		t.Fatal(err)
	}

	// After the sale, on each replica's page: the API's numbers, charts
	// drawn, and every 201 of the sale counted, from both replicas.
	for i, u := range urls {
		if i > 0 {
			b.Navigate(u + "/dashboard")
		}
		want := fmt.Sprintf(`(() => { const p = %s; return p.stock === "%d" && p.sold === "%d" && p.points >= 2 && p.soldLine >= 2 && p.orderBars >= 1 && p.outcomeBar >= 1 && p.created === %d; })()`,
			readPage, final.Stock, final.Sold, res.rep.Created)
		b.WaitTrue(want, 20*time.Second, func() string {
			return fmt.Sprintf("replica %d's page shows %+v; want stock %d, sold %d, charts drawn and %d purchases counted",
				i+1, browsertest.Eval[shown](b, readPage), final.Stock, final.Sold, res.rep.Created)
		})
		if got := browsertest.Eval[shown](b, readPage).Scope; got == "" || got[:5] != "every" {
			t.Errorf("replica %d: scope %q, want every replica's", i+1, got)
		}
	}
	b.Screenshot(browsertest.ScreenshotPath(t, "dashboard.png"))
}

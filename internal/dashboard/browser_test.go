package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-ref/seckill/internal/apiclient"
	"github.com/seckill-ref/seckill/internal/app"
	"github.com/seckill-ref/seckill/internal/dashboard"
	"github.com/seckill-ref/seckill/internal/testinfra/browsertest"
	"github.com/seckill-ref/seckill/internal/testinfra/poll"
	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/loadtest"
)

const adminToken = "dashboard-admin-token"

// serveReplicas starts n replicas on one Redis and one SQLite file, each
// serving on its own loopback port until the test ends, and returns their
// base URLs. Each of opts changes the replicas' configuration.
func serveReplicas(t *testing.T, n int, opts ...func(*app.Config)) []string {
	t.Helper()
	r := redistest.Start(t)
	db := filepath.Join(t.TempDir(), "seckill.db")
	var urls []string
	for range n {
		cfg := app.DefaultConfig()
		cfg.RedisAddr, cfg.Database, cfg.AdminToken = r.Addr(), db, adminToken
		cfg.ShutdownTimeout = 5 * time.Second
		for _, o := range opts {
			o(&cfg)
		}
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

// shown is what the page shows: the totals, the rows of the hottest
// products, and the selected product.
type shown struct {
	Product    string   `json:"product"`
	Stock      string   `json:"stock"`
	Sold       string   `json:"sold"`
	Polls      int      `json:"polls"`
	Points     int      `json:"points"`     // sold points of the stock chart
	SoldLine   int      `json:"soldLine"`   // points of the sold polyline drawn
	OrderBars  int      `json:"orderBars"`  // orders-per-second bars drawn
	OutcomeBar int      `json:"outcomeBar"` // outcome bars drawn
	Created    int64    `json:"created"`    // 201s in the page's timeline, all replicas
	Scope      string   `json:"scope"`
	Products   string   `json:"products"` // the totals' tiles
	TotalStock string   `json:"totalStock"`
	TotalSold  string   `json:"totalSold"`
	SoldOut    string   `json:"soldOut"`
	Rows       []string `json:"rows"`      // product ids of the table's rows, in order
	Top        []string `json:"top"`       // product ids of the last poll's top
	Others     string   `json:"others"`    // the line under the rows
	TableRows  int      `json:"tableRows"` // every tr in the document
}

const readPage = `(() => {
  const q = id => document.getElementById(id);
  const soldLine = document.querySelector("#chart-stock polyline.sold");
  return {
    product: document.body.dataset.selected || "",
    stock: q("stock").dataset.value || "",
    sold: q("sold").dataset.value || "",
    polls: Number(document.body.dataset.polls || 0),
    points: Number(q("chart-stock").dataset.points || 0),
    soldLine: soldLine ? soldLine.getAttribute("points").trim().split(/\s+/).length : 0,
    orderBars: document.querySelectorAll("#chart-orders rect.bar").length,
    outcomeBar: document.querySelectorAll("#chart-outcomes rect.bar").length,
    created: [...state.seconds.values()].reduce((n, s) => n + (s.outcomes.created || 0), 0),
    scope: q("scope").textContent,
    products: q("inv-products").dataset.value || "",
    totalStock: q("inv-stock").dataset.value || "",
    totalSold: q("inv-sold").dataset.value || "",
    soldOut: q("inv-sold-out").dataset.value || "",
    rows: [...document.querySelectorAll("#top-rows tr[data-id]")].map(tr => tr.dataset.id),
    top: state.top.map(p => String(p.id)),
    others: q("others").textContent,
    tableRows: document.querySelectorAll("tr").length,
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

	// A steady sale that lasts until the page has been seen during it
	// (end), however long a loaded machine takes to get there, with more
	// stock than it can sell before its deadline: there is a "during".
	const rate, limit = 100, time.Minute
	const stock = rate * 60
	type result struct {
		rep loadtest.Report
		err error
	}
	done := make(chan result, 1)
	end, finished := make(chan struct{}), make(chan struct{})
	endSale := sync.OnceFunc(func() { close(end) })
	t.Cleanup(func() { endSale(); <-finished }) // before the replicas stop
	go func() {
		defer close(finished)
		rep, err := loadtest.Run(context.Background(), loadtest.Config{
			Targets: urls, AdminToken: adminToken, Stock: stock,
			Rate: rate, Duration: limit, End: end, ProgressMode: loadtest.ProgressOff,
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
	// The page lists a product once the dashboard's seconds have its
	// orders, a second or so after they were placed.
	polls := browsertest.Eval[shown](b, readPage).Polls
	b.WaitTrue(fmt.Sprintf(`Number(document.body.dataset.polls) >= %d && document.body.dataset.selected === "1"`, polls+2), 20*time.Second,
		func() string {
			return fmt.Sprintf("the page stopped polling, or never listed product 1: %+v", browsertest.Eval[shown](b, readPage))
		})
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

	endSale()
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
		want := fmt.Sprintf(`(() => { const p = %s; return p.stock === "%d" && p.sold === "%d" && p.points >= 2 && p.soldLine >= 2 && p.orderBars >= 1 && p.outcomeBar >= 1 && p.created === %d && p.products === "1" && p.totalSold === "%[3]d" && p.rows.join() === "1"; })()`,
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

// The page with 64 products, then 2,000, a few hundred of them sold: the
// totals tiles show the database's sums, the table the TopN of the last
// poll, in its order, with the product sold most far ahead at the top,
// and one line for the others, so the document holds a dozen rows, not
// thousands.
func TestDashboardManyProductsInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: headless Chromium")
	}
	urls := serveReplicas(t, 1)
	api := apiclient.New(http.DefaultClient, urls[0], adminToken)
	ctx := context.Background()
	b := browsertest.Start(t, 1280, 900)
	b.Navigate(urls[0] + "/dashboard")
	b.WaitTrue(`Number(document.body.dataset.polls) >= 1`, 20*time.Second, func() string { return "the page never polled its data" })

	var ids []int64
	users, created := 0, 0
	for _, n := range []int{64, 2000} {
		// Products up to n, each with a stock of 5 to 14.
		for len(ids) < n {
			p, err := api.CreateProduct(ctx, fmt.Sprintf("product %d of the sale", len(ids)+1), int64(5+len(ids)%10))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, p.ID)
		}
		// The first product sells out (ten buyers for its stock of 5),
		// the next 29 sell 1 or 2 each, and a long tail of n/8 once:
		// the first is far ahead of the others in every second.
		var sales []int64
		for range 10 {
			sales = append(sales, ids[0])
		}
		for i := 1; i < 30; i++ {
			sales = append(sales, ids[i])
			if i%3 == 0 {
				sales = append(sales, ids[i])
			}
		}
		for i := 30; i < 30+n/8; i++ {
			sales = append(sales, ids[i])
		}
		created += buy(t, api, sales, &users)

		var list struct{ Products []apiclient.Product }
		if err := api.Do(ctx, "list products", http.MethodGet, "/api/v1/products", nil, &list); err != nil {
			t.Fatal(err)
		}
		var stock, sold, soldOut int64
		for _, p := range list.Products {
			stock, sold = stock+p.Stock, sold+p.Sold
			if p.Stock == 0 {
				soldOut++
			}
		}
		want := fmt.Sprintf(`(() => { const p = %s; return p.products === "%d" && p.totalStock === "%d" && p.totalSold === "%d" && p.soldOut === "%d" && p.rows.length === %d && p.rows.join() === p.top.join() && p.rows[0] === "%d" && p.others.startsWith("and %s more products: stock ") && p.created === %d; })()`,
			readPage, len(list.Products), stock, sold, soldOut, dashboard.TopN, ids[0], thousands(n-dashboard.TopN), created)
		b.WaitTrue(want, 20*time.Second, func() string {
			return fmt.Sprintf("with %d products the page shows %+v; want %d products, stock %d, sold %d, %d sold out, %d rows led by product %d, the others' line and %d purchases counted",
				n, browsertest.Eval[shown](b, readPage), len(list.Products), stock, sold, soldOut, dashboard.TopN, ids[0], created)
		})
		got := browsertest.Eval[shown](b, readPage)
		if got.TableRows > dashboard.TopN+5 {
			t.Errorf("with %d products the document has %d table rows; want the header, %d products and the others' line", n, got.TableRows, dashboard.TopN)
		}
		t.Logf("%d products: %s", n, got.Others)
		b.Screenshot(browsertest.ScreenshotPath(t, fmt.Sprintf("dashboard-%d.png", n)))
	}
}

// buy sells one item of each of the products in sales to a new user
// each, 8 at a time, and returns how many were sold; a product sold out
// answers sold_out, which is fine.
func buy(t *testing.T, api *apiclient.Client, sales []int64, users *int) int {
	t.Helper()
	var wg sync.WaitGroup
	var created atomic.Int64
	errs := make(chan error, len(sales))
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				_, err := api.Purchase(context.Background(), sales[i], fmt.Sprintf("buyer-%d", *users+i))
				var e *apiclient.Error
				switch {
				case err == nil:
					created.Add(1)
				case !errors.As(err, &e) || e.Code != "sold_out":
					errs <- err
				}
			}
		})
	}
	for i := range sales {
		next <- i
	}
	close(next)
	wg.Wait()
	*users += len(sales)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return int(created.Load())
}

// thousands writes n with a comma between groups of three digits, as the
// page does.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// lifeShown is what the page shows of the orders' life: the reserved
// tile, the orders closed by state in its window, and what its charts
// drew of them.
type lifeShown struct {
	Polls       int              `json:"polls"`
	Reserved    string           `json:"reserved"`    // the reserved tile
	Closed      map[string]int64 `json:"closed"`      // the paid, cancelled and expired tiles
	ClosedBars  map[string]int   `json:"closedBars"`  // bars of each state in the chart of closed orders
	ReservedPts int              `json:"reservedPts"` // points of the selected product's reserved line
	MaxReserved int64            `json:"maxReserved"` // the most the page's samples of it showed
}

const readLife = `(() => {
  const q = id => document.getElementById(id);
  const closed = {}, bars = {};
  for (const o of ["paid", "cancelled", "expired"]) {
    closed[o] = Number(q("closed-" + o).dataset.value || -1);
    bars[o] = document.querySelectorAll("#chart-closed rect.bar." + o).length;
  }
  const line = document.querySelector("#chart-stock polyline.reserved");
  let most = 0;
  for (const s of state.seconds.values()) for (const ps of Object.values(s.products || {})) most = Math.max(most, ps.reserved || 0);
  return {
    polls: Number(document.body.dataset.polls || 0),
    reserved: q("inv-reserved").dataset.value || "",
    closed, closedBars: bars,
    reservedPts: line ? line.getAttribute("points").trim().split(/\s+/).length : 0,
    maxReserved: most,
  };
})()`

// A sale with a payment window, on two replicas: the page shows units
// reserved during the sale, and after it, on either replica, the orders
// paid, cancelled and expired as the orders listed have them (every
// replica's moves and expiries, summed in Redis), each state drawn in
// the chart of orders closed per second, and nothing reserved left.
func TestDashboardShowsReservationsInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: headless Chromium")
	}
	urls := serveReplicas(t, 2, func(c *app.Config) { c.PayWindow = time.Second })
	b := browsertest.Start(t, 1280, 1100)
	b.Navigate(urls[0] + "/dashboard")
	b.WaitTrue(`Number(document.body.dataset.polls) >= 1`, 20*time.Second, func() string { return "the page never polled its data" })

	const stock = 20
	type result struct {
		rep loadtest.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := loadtest.Run(context.Background(), loadtest.Config{
			Targets: urls, AdminToken: adminToken, Stock: stock,
			Buyers: 300, BurstWindow: 4 * time.Second, ProgressMode: loadtest.ProgressOff,
			Life: loadtest.Life{Pay: 0.6, Cancel: 0.2, Late: 0.25, CloseOut: true},
		}, io.Discard)
		done <- result{rep, err}
	}()
	// During the sale: the selected product's samples show units reserved.
	b.WaitTrue(`(() => { const p = `+readLife+`; return p.maxReserved > 0 && p.reservedPts >= 2; })()`, 30*time.Second, func() string {
		return fmt.Sprintf("the page never showed a unit reserved: %+v", browsertest.Eval[lifeShown](b, readLife))
	})
	b.Screenshot(browsertest.ScreenshotPath(t, "dashboard-reservations-during.png"))

	res := <-done
	if res.err != nil || !res.rep.OK() || res.rep.Reservations == nil {
		t.Fatalf("the sale: %v, %s", res.err, res.rep.Verdict())
	}
	orders, err := apiclient.New(http.DefaultClient, urls[1], "").Orders(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"paid": 0, "cancelled": 0, "expired": 0}
	for _, o := range orders {
		if _, ok := want[o.State]; ok {
			want[o.State]++
		}
	}
	if want["paid"] != stock || want["cancelled"] == 0 || want["expired"] == 0 {
		t.Fatalf("orders by state %v: want %d paid, and some cancelled and expired", want, stock)
	}
	for i, u := range urls {
		if i > 0 {
			b.Navigate(u + "/dashboard")
		}
		cond := fmt.Sprintf(`(() => { const p = %s; return p.reserved === "0" && p.closed.paid === %d && p.closed.cancelled === %d && p.closed.expired === %d && p.closedBars.paid > 0 && p.closedBars.cancelled > 0 && p.closedBars.expired > 0; })()`,
			readLife, want["paid"], want["cancelled"], want["expired"])
		b.WaitTrue(cond, 20*time.Second, func() string {
			return fmt.Sprintf("replica %d's page shows %+v; want nothing reserved and the orders closed %v, each state drawn", i+1, browsertest.Eval[lifeShown](b, readLife), want)
		})
	}
	b.Screenshot(browsertest.ScreenshotPath(t, "dashboard-reservations.png"))
}

package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/seckill-ref/seckill/internal/testinfra/pgtest"
	"github.com/seckill-ref/seckill/store"
)

// On a freshly migrated database, which has no statistics on orders until
// autovacuum first analyzes it, every per-buyer lookup the store sends to
// PostgreSQL is planned through the (product_id, user_id) index with both
// columns in the index condition: at every size of one hot product's
// orders, in the plan made for the arguments (custom) and in the plan made
// once for any (generic, which pgx's prepared statements get after a few
// runs), and again once the table has statistics. The control is the IN
// list GORM builds (what the store sent before, and still sends to
// SQLite): on the same table it is planned as a scan of the product's
// orders through idx_orders_product_id, at some size or other; the test
// fails if it never is, since it would then show nothing.
func TestPostgresPlansUseTheBuyerIndex(t *testing.T) {
	db := pgtest.Database(t)
	s := open(t, db)
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(db)
	if err != nil {
		t.Fatal(err)
	}
	// No prepared statements of pgx's own: explain deallocates them all.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The test is about the time before autovacuum's first ANALYZE.
	if _, err := conn.Exec(ctx, "ALTER TABLE orders SET (autovacuum_enabled = off)"); err != nil {
		t.Fatal(err)
	}
	p := newProduct(t, s, 10)
	var users []string
	for i := range 32 {
		users = append(users, fmt.Sprintf("fill-%d", i*7+1), fmt.Sprintf("new-%d", i))
	}
	in := make([]string, len(users))
	for i := range users {
		in[i] = fmt.Sprintf("$%d", i+2)
	}
	control := store.Lookup{
		Name: "control: the IN list",
		SQL:  `SELECT "user_id" FROM "orders" WHERE product_id = $1 AND user_id IN (` + strings.Join(in, ", ") + `)`,
		Args: func(id int64, users []string) []any {
			args := []any{id}
			for _, u := range users {
				args = append(args, u)
			}
			return args
		},
	}
	controlWrong := 0
	check := func(stage string, lookups []store.Lookup) {
		for _, l := range lookups {
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				plan := explain(t, conn, l, mode, p.ID, users)
				why := buyerIndexMissing(t, plan)
				switch {
				case why == "":
				case l.Name == control.Name:
					t.Logf("%s, %s, %s: %s", stage, l.Name, mode, why)
					controlWrong++
				default:
					t.Errorf("%s, %s, %s: %s; plan: %s", stage, l.Name, mode, why, plan)
				}
			}
		}
	}
	filled := 0
	for _, n := range []int{0, 100, 1000, 10_000, 30_000} {
		if _, err := conn.Exec(ctx, `INSERT INTO orders (product_id, user_id, fence, created_at)
			SELECT $1, 'fill-' || i, 0, now() FROM generate_series($2::int, $3::int) AS i`, p.ID, filled+1, n); err != nil {
			t.Fatal(err)
		}
		filled = n
		var stats int
		var tuples float64
		if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_stats WHERE tablename = 'orders'),
			(SELECT reltuples FROM pg_class WHERE relname = 'orders')`).Scan(&stats, &tuples); err != nil {
			t.Fatal(err)
		}
		if stats != 0 || tuples >= 0 {
			t.Fatalf("%d orders: %d column statistics, reltuples %v: want none, and -1 (never analyzed)", n, stats, tuples)
		}
		check(fmt.Sprintf("%d orders, no statistics", n), append(store.BuyerLookups, control))
	}
	if controlWrong == 0 {
		t.Error("the control was planned through the buyer index at every size: this server plans even the IN list right without statistics, and the test cannot show the difference")
	}
	if _, err := conn.Exec(ctx, "ANALYZE orders"); err != nil {
		t.Fatal(err)
	}
	check(fmt.Sprintf("%d orders, analyzed", filled), store.BuyerLookups)
}

// explain returns l's plan as JSON, made in mode (plan_cache_mode) for a
// prepared statement, as the store's prepared statements are planned.
func explain(t *testing.T, conn *pgx.Conn, l store.Lookup, mode string, productID int64, users []string) string {
	t.Helper()
	ctx := context.Background()
	for _, stmt := range []string{"SET plan_cache_mode = " + mode, "DEALLOCATE ALL", "PREPARE lookup AS " + l.SQL} {
		if _, err := conn.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	// EXECUTE takes its arguments as SQL, not as parameters.
	var literals []string
	for _, a := range l.Args(productID, users) {
		switch a := a.(type) {
		case int64:
			literals = append(literals, fmt.Sprint(a))
		case string:
			literals = append(literals, quote(a))
		case []string:
			quoted := make([]string, len(a))
			for i, s := range a {
				quoted[i] = quote(s)
			}
			literals = append(literals, "ARRAY["+strings.Join(quoted, ", ")+"]::text[]")
		case []int64:
			ids := make([]string, len(a))
			for i, v := range a {
				ids[i] = fmt.Sprint(v)
			}
			literals = append(literals, "ARRAY["+strings.Join(ids, ", ")+"]::bigint[]")
		default:
			t.Fatalf("%s: an argument of type %T", l.Name, a)
		}
	}
	var plan string
	query := "EXPLAIN (FORMAT JSON) EXECUTE lookup(" + strings.Join(literals, ", ") + ")"
	if err := conn.QueryRow(ctx, query).Scan(&plan); err != nil {
		t.Fatalf("%s: %v", l.Name, err)
	}
	return plan
}

// quote is s as an SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// buyerIndexMissing says what is wrong with a plan of a per-buyer lookup,
// or "" if nothing is: every index scan of orders must be of the buyer
// index, with both its columns in the condition, and there must be one.
func buyerIndexMissing(t *testing.T, plan string) string {
	t.Helper()
	var top []struct{ Plan planNode }
	if err := json.Unmarshal([]byte(plan), &top); err != nil || len(top) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	probes := 0
	var walk func(n planNode) string
	walk = func(n planNode) string {
		switch {
		case n.Type == "Seq Scan" && n.Relation == "orders":
			return "a sequential scan of orders"
		case n.Index == "idx_orders_live":
			if !strings.Contains(n.Cond, "product_id") || !strings.Contains(n.Cond, "user_id") {
				return fmt.Sprintf("the buyer index with the condition %q, not both columns", n.Cond)
			}
			probes++
		case strings.HasPrefix(n.Index, "idx_orders") || strings.HasPrefix(n.Index, "orders_"):
			return fmt.Sprintf("%s on %s", n.Type, n.Index)
		}
		for _, c := range n.Plans {
			if why := walk(c); why != "" {
				return why
			}
		}
		return ""
	}
	if why := walk(top[0].Plan); why != "" {
		return why
	}
	if probes == 0 {
		return "no scan of the buyer index"
	}
	return ""
}

// planNode is the part of a node of EXPLAIN (FORMAT JSON) that
// buyerIndexMissing reads.
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Cond     string     `json:"Index Cond"`
	Plans    []planNode `json:"Plans"`
}

// Command designtable turns the output of BenchmarkDesigns (package
// internal/demo) into the Markdown tables of bench/README.md:
//
//	go test -run '^$' -bench Designs -benchtime 5000x -timeout 60m ./internal/demo | tee designs.txt
//	go run ./internal/demo/testdata/designtable designs.txt
//
// It reads the files named (standard input without any), keeps the lines
// of BenchmarkDesigns' rows (round=R/db=D/products=N/design=X/purchase or
// sold-out) and prints, per database, number of products and design, the
// median over the rounds (and the range) of purchases/s, of the p50 and
// p99 of the 201s, of sold-out answers/s and of the time it took to create
// the row's products (both sets); each design's ratio to
// redis-counter and to lock, taken within each round (the rows of one
// round ran back to back) and reported as the median of the rounds'
// ratios; and then the ratios the lock design is measured by. A row that
// is missing from a round leaves that round out of the ratios that need it.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// rowRE matches a result line: the row's name, the -P suffix, the
// iterations, then value-unit pairs.
var rowRE = regexp.MustCompile(`^BenchmarkDesigns/round=(\d+)/db=([\w-]+)/products=(\d+)/design=([\w-]+)/(purchase|sold-out)(?:-\d+)?\s+\d+\s+(.*)$`)

// key names one row of one round.
type key struct {
	round    int
	db       string
	products int
	design   string
	kind     string // purchase or sold-out
}

// result is a row's metrics by unit: req/s, p50-ms, p99-ms.
type result map[string]float64

func main() {
	var in []io.Reader
	for _, name := range os.Args[1:] {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer f.Close()
		in = append(in, f)
	}
	if len(in) == 0 {
		in = append(in, os.Stdin)
	}
	rows, err := parse(io.MultiReader(in...))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if len(rows) == 0 {
		fmt.Fprintln(os.Stderr, "designtable: no BenchmarkDesigns rows in the input")
		os.Exit(1)
	}
	write(os.Stdout, rows)
}

func parse(r io.Reader) (map[key]result, error) {
	rows := map[key]result{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := rowRE.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		round, _ := strconv.Atoi(m[1])
		products, _ := strconv.Atoi(m[3])
		res := result{}
		f := strings.Fields(m[6])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("designtable: %q: %v", sc.Text(), err)
			}
			res[f[i+1]] = v
		}
		rows[key{round, m[2], products, m[4], m[5]}] = res
	}
	return rows, sc.Err()
}

// stat is the median of the values and their range.
type stat struct{ med, lo, hi float64 }

func median(vs []float64) (stat, bool) {
	if len(vs) == 0 {
		return stat{}, false
	}
	vs = slices.Clone(vs)
	slices.Sort(vs)
	med := vs[len(vs)/2]
	if len(vs)%2 == 0 {
		med = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	return stat{med, vs[0], vs[len(vs)-1]}, true
}

// table is the parsed rows, with the orders they appeared in.
type table struct {
	rows     map[key]result
	rounds   []int
	dbs      []string
	products []int
	designs  []string
}

func newTable(rows map[key]result) *table {
	t := &table{rows: rows}
	for k := range rows {
		t.rounds = appendNew(t.rounds, k.round)
		t.dbs = appendNew(t.dbs, k.db)
		t.products = appendNew(t.products, k.products)
		t.designs = appendNew(t.designs, k.design)
	}
	slices.Sort(t.rounds)
	slices.Sort(t.products)
	slices.SortFunc(t.dbs, func(a, b string) int { return order(dbOrder, a) - order(dbOrder, b) })
	slices.SortFunc(t.designs, func(a, b string) int { return order(designOrder, a) - order(designOrder, b) })
	return t
}

var (
	dbOrder     = []string{"sqlite", "postgres"}
	designOrder = []string{"lock", "conditional", "redis-counter", "redis-counter-async"}
	dbNames     = map[string]string{"sqlite": "SQLite", "postgres": "PostgreSQL"}
)

// order is s's place in known, or after all of them.
func order(known []string, s string) int {
	if i := slices.Index(known, s); i >= 0 {
		return i
	}
	return len(known)
}

func appendNew[T comparable](s []T, v T) []T {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// metric is unit of the row k, in every round that has it.
func (t *table) metric(k key, unit string) []float64 {
	var vs []float64
	for _, r := range t.rounds {
		k.round = r
		if v, ok := t.rows[k][unit]; ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// ratio is req/s of row a over that of row b, in every round that has
// both.
func (t *table) ratio(a, b key) []float64 {
	var vs []float64
	for _, r := range t.rounds {
		a.round, b.round = r, r
		ra, okA := t.rows[a]
		rb, okB := t.rows[b]
		if okA && okB && rb["req/s"] > 0 {
			vs = append(vs, ra["req/s"]/rb["req/s"])
		}
	}
	return vs
}

func rate(vs []float64) string {
	s, ok := median(vs)
	if !ok {
		return ""
	}
	if len(vs) == 1 {
		return thousands(s.med)
	}
	return fmt.Sprintf("%s (%s–%s)", thousands(s.med), thousands(s.lo), thousands(s.hi))
}

func ratio(vs []float64) string {
	s, ok := median(vs)
	if !ok {
		return ""
	}
	if s.lo == 1 && s.hi == 1 {
		return "1" // a row against itself
	}
	if len(vs) == 1 {
		return fmt.Sprintf("%.2f", s.med)
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", s.med, s.lo, s.hi)
}

func ms(vs []float64) string {
	s, ok := median(vs)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%.0f ms", s.med)
}

func seconds(vs []float64) string {
	s, ok := median(vs)
	if !ok {
		return ""
	}
	if s.med < 1 {
		return fmt.Sprintf("%.0f ms", 1000*s.med)
	}
	return fmt.Sprintf("%.1f s", s.med)
}

// products is "1 product", "2,000 products".
func products(n int) string {
	if n == 1 {
		return "1 product"
	}
	return thousands(float64(n)) + " products"
}

// thousands is v rounded, with commas: 12,345.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func write(w io.Writer, rows map[key]result) {
	t := newTable(rows)
	fmt.Fprintf(w, "Rounds: %d. Medians of the rounds (range); a ratio is the median of the rounds' ratios (range).\n\n", len(t.rounds))
	fmt.Fprintln(w, "| database | products | design | purchases/s | × redis-counter | × lock | p50 | p99 | sold-out answers/s | sold-out × lock | sold-out p99 | products created in |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, db := range t.dbs {
		for _, n := range t.products {
			for _, d := range t.designs {
				buy := key{db: db, products: n, design: d, kind: "purchase"}
				out := key{db: db, products: n, design: d, kind: "sold-out"}
				vsCounter, vsLock := buy, buy
				vsCounter.design, vsLock.design = "redis-counter", "lock"
				outLock := out
				outLock.design = "lock"
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
					dbName(db), thousands(float64(n)), d,
					rate(t.metric(buy, "req/s")), ratio(t.ratio(buy, vsCounter)), ratio(t.ratio(buy, vsLock)),
					ms(t.metric(buy, "p50-ms")), ms(t.metric(buy, "p99-ms")),
					rate(t.metric(out, "req/s")), ratio(t.ratio(out, outLock)), ms(t.metric(out, "p99-ms")),
					seconds(t.metric(buy, "create-s")))
			}
		}
	}
	if len(t.products) == 0 {
		return
	}
	most, fewest := t.products[len(t.products)-1], t.products[0]
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The lock design's ratios, each taken within a round:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| database | ratio | median (range) |")
	fmt.Fprintln(w, "| --- | --- | --- |")
	for _, db := range t.dbs {
		lock := func(n int, kind string) key { return key{db: db, products: n, design: "lock", kind: kind} }
		other := func(n int, design string) key { return key{db: db, products: n, design: design, kind: "purchase"} }
		lines := []struct {
			name string
			vs   []float64
		}{
			{"lock / redis-counter, " + products(most), t.ratio(lock(most, "purchase"), other(most, "redis-counter"))},
			{"lock / redis-counter-async, " + products(most), t.ratio(lock(most, "purchase"), other(most, "redis-counter-async"))},
			{"lock / redis-counter, " + products(fewest), t.ratio(lock(fewest, "purchase"), other(fewest, "redis-counter"))},
			{"lock: " + products(most) + " / " + products(fewest), t.ratio(lock(most, "purchase"), lock(fewest, "purchase"))},
			{"lock, sold out: " + products(most) + " / " + products(fewest), t.ratio(lock(most, "sold-out"), lock(fewest, "sold-out"))},
		}
		for _, l := range lines {
			fmt.Fprintf(w, "| %s | %s | %s |\n", dbName(db), l.name, ratio(l.vs))
		}
	}
}

func dbName(db string) string {
	if n, ok := dbNames[db]; ok {
		return n
	}
	return db
}

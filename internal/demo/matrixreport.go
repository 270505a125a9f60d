package demo

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"os"
	"strings"
	"time"

	"github.com/seckill-ref/seckill/loadtest"
)

// The matrix as a page (-matrix -report) and as JSON (-matrix
// -report-json). Each row's numbers and chart come from its
// loadtest.Report.

//go:embed matrixreport.html
var matrixReportText string

var matrixReport = template.Must(template.New("matrix").Funcs(template.FuncMap{
	"dur": func(d time.Duration) string { return roundDuration(d).String() },
}).Parse(matrixReportText))

// matrixRow is one row as the page and the JSON show it.
type matrixRow struct {
	Mode           string `json:"mode"`
	Batch          string `json:"batch"`
	Products       int    `json:"products"`
	Fault          string `json:"fault"`
	Label          string `json:"label"`
	Name           string `json:"name"`
	ExpectOversell bool   `json:"expect_oversell"`
	Ran            bool   `json:"ran"`
	Error          string `json:"error,omitempty"`
	Matched        bool   `json:"matched"`
	Linearizable   string `json:"linearizable"` // yes, NO, unknown or - (not checked)
	Verdict        string `json:"verdict"`      // ok, mismatch, fault not injected or error
	Why            string `json:"why"`
	FenceRejected  int64  `json:"fence_rejected"`
	LeasesLost     int64  `json:"leases_lost"`
	// Overlaps counts the fault rows' stalled holders that saw the next
	// holder get in; Sales is the row's sales, more than 1 when one
	// without its fault ran again.
	Overlaps int64 `json:"overlaps"`
	// FaultEvidence is what a network fault, or a restart or a kill over
	// many products, did ("" if it did not happen, or the row has none).
	FaultEvidence string          `json:"fault_evidence,omitempty"`
	Sales         int             `json:"sales"`
	Report        loadtest.Report `json:"report"`
	Chart         template.HTML   `json:"-"`
	Class         string          `json:"-"` // the verdict's CSS class
}

// matrixPage is the whole matrix.
type matrixPage struct {
	Stock    int64       `json:"stock"`
	Load     string      `json:"load"`
	Replicas int         `json:"replicas"`
	Passed   bool        `json:"passed"`
	Rows     []matrixRow `json:"rows"`
	FaultTTL string      `json:"-"`
	Fault    string      `json:"-"`
	// NetFaults and ManyProducts are the network-fault rows' legend and
	// that of the rows over many products.
	NetFaults, ManyProducts string `json:"-"`
	// PassLine is the verdict line of a matrix that passed.
	PassLine string `json:"-"`
}

func newMatrixPage(o options, results []*result) matrixPage {
	load := shapeText(o.sale)
	if m := o.sale.Mix.String(); m != "" {
		load += ", with " + m + " mixed in"
	}
	p := matrixPage{Stock: o.sale.Stock, Load: load, Replicas: o.replicas, Passed: true,
		FaultTTL: faultTTL.String(),
		Fault: fmt.Sprintf("holders work %v; the first, and %.0f%% of the others, then stall until the next holder is in, %v at most; a sale without the fault runs again, %d sales at most",
			faultWork, faultProb*100, faultMaxStall, maxRowAttempts),
		NetFaults:    strings.ReplaceAll(netLegend(), "\n", " "),
		ManyProducts: strings.ReplaceAll(productsLegend(), "\n", " ")}
	p.PassLine = "matrix: " + passLine(results)
	for _, r := range results {
		v, why := r.judge()
		row := matrixRow{
			Mode: r.designName(), Batch: r.batchText(), Products: r.productCount(o), Fault: r.fault, Label: r.label, Name: r.name(),
			ExpectOversell: r.oversell, Ran: r.ran, Matched: v == verdictOK,
			Verdict: string(v), Why: why + r.earlierText(), Class: strings.ReplaceAll(string(v), " ", "-"),
			FenceRejected: r.fenceRejected, LeasesLost: r.leaseLost, Overlaps: r.overlaps, FaultEvidence: r.injected, Sales: r.attempt,
			Report: r.rep, Linearizable: r.linText(),
		}
		if r.pfault != noProductsFault && r.pev.missing == "" {
			row.FaultEvidence = r.productsFaultText()
		}
		if r.err != nil {
			row.Error = r.err.Error()
		}
		if v != verdictOK && v != verdictSkipped {
			p.Passed = false
		}
		if r.ran && r.err == nil {
			row.Chart = r.rep.SaleChart(340, 130)
		}
		p.Rows = append(p.Rows, row)
	}
	return p
}

// createMatrixReports creates the report files before the first row, so
// that a bad path fails at once.
func createMatrixReports(o options) error {
	for _, path := range []string{o.sale.Report, o.sale.ReportJSON} {
		if path == "" {
			continue
		}
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("report file: %w", err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("report file: %w", err)
		}
	}
	return nil
}

// writeMatrixReports writes the files -report and -report-json ask for.
func writeMatrixReports(o options, results []*result) error {
	if o.sale.Report == "" && o.sale.ReportJSON == "" {
		return nil
	}
	p := newMatrixPage(o, results)
	var errs []error
	if o.sale.Report != "" {
		errs = append(errs, writeFile(o.sale.Report, func(w io.Writer) error { return matrixReport.Execute(w, p) }))
	}
	if o.sale.ReportJSON != "" {
		errs = append(errs, writeFile(o.sale.ReportJSON, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(p)
		}))
	}
	return errors.Join(errs...)
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := errors.Join(write(w), w.Flush(), f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

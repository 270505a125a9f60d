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
	Mode           string          `json:"mode"`
	Batch          string          `json:"batch"`
	Fault          string          `json:"fault"`
	Label          string          `json:"label"`
	Name           string          `json:"name"`
	ExpectOversell bool            `json:"expect_oversell"`
	Ran            bool            `json:"ran"`
	Error          string          `json:"error,omitempty"`
	Matched        bool            `json:"matched"`
	Linearizable   string          `json:"linearizable"` // yes, NO, unknown or - (not checked)
	Verdict        string          `json:"verdict"`      // ok, mismatch or error
	Why            string          `json:"why"`
	FenceRejected  int64           `json:"fence_rejected"`
	LeasesLost     int64           `json:"leases_lost"`
	Report         loadtest.Report `json:"report"`
	Chart          template.HTML   `json:"-"`
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
}

func newMatrixPage(o options, results []*result) matrixPage {
	load := shapeText(o.sale)
	if m := o.sale.Mix.String(); m != "" {
		load += ", with " + m + " mixed in"
	}
	p := matrixPage{Stock: o.sale.Stock, Load: load, Replicas: o.replicas, Passed: true,
		FaultTTL: faultTTL.String(),
		Fault:    fmt.Sprintf("holders work %v and %.0f%% of them stall %v more", faultWork, faultProb*100, faultPause)}
	for _, r := range results {
		row := matrixRow{
			Mode: string(r.mode), Batch: r.batchText(), Fault: r.fault, Label: r.label,
			ExpectOversell: r.oversell, Ran: r.ran, Matched: r.matched(),
			FenceRejected: r.fenceRejected, LeasesLost: r.leaseLost, Report: r.rep, Linearizable: r.linText(),
		}
		row.Name = row.Mode
		if r.fault != "" {
			row.Name += " (" + r.fault + ")"
		}
		if r.label != "" {
			row.Name += " (" + r.label + ")"
		}
		switch {
		case !r.ran || r.err != nil:
			row.Verdict, row.Why = "error", "did not run to the end"
			if r.err != nil {
				row.Error = r.err.Error()
			}
		case r.matched():
			row.Verdict, row.Why = "ok", r.why
		case r.oversell:
			row.Verdict, row.Why = "mismatch", "did not oversell, but it should have: the race did not happen in this run"
		case r.rep.Oversold:
			row.Verdict, row.Why = "mismatch", "OVERSOLD, and it must not"
		default:
			row.Verdict, row.Why = "mismatch", "did not oversell, but its history must be linearizable: "+r.rep.Linearizability.Line()
		}
		if row.Verdict != "ok" {
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

package loadtest

import (
	"bufio"
	"errors"
	"fmt"
	"os"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"
)

// plotThreshold is the number of points per series above which the plot is
// downsampled, Vegeta's own default.
const plotThreshold = 4000

// recorder keeps the raw results for Vegeta's tools: a gob file for
// `vegeta report` and `vegeta plot`, and the HTML plot itself.
type recorder struct {
	outPath, plotPath string

	outFile *os.File
	outBuf  *bufio.Writer
	enc     vegeta.Encoder
	plot    *plot.Plot
	err     error // first write error; later results are not recorded
}

// newRecorder creates the files up front, so a bad path is a usage error
// before any load is sent rather than a lost run after it.
func newRecorder(outPath, plotPath, title string) (*recorder, error) {
	rec := &recorder{outPath: outPath, plotPath: plotPath}
	if outPath != "" {
		f, err := os.Create(outPath)
		if err != nil {
			return nil, fmt.Errorf("%w: results file: %v", ErrInvalidConfig, err)
		}
		rec.outFile, rec.outBuf = f, bufio.NewWriter(f)
		rec.enc = vegeta.NewEncoder(rec.outBuf)
	}
	if plotPath != "" {
		// Create now to fail early; written in close, once the data is there.
		f, err := os.Create(plotPath)
		if err != nil {
			rec.abort()
			return nil, fmt.Errorf("%w: plot file: %v", ErrInvalidConfig, err)
		}
		if err := f.Close(); err != nil {
			rec.abort()
			return nil, fmt.Errorf("%w: plot file: %v", ErrInvalidConfig, err)
		}
		rec.plot = plot.New(plot.Title(title), plot.Downsample(plotThreshold), plot.Label(plotLabel))
	}
	return rec, nil
}

// add records one result.
func (rec *recorder) add(r *vegeta.Result) {
	if rec.err != nil {
		return
	}
	if rec.enc != nil {
		if err := rec.enc.Encode(r); err != nil {
			rec.err = fmt.Errorf("loadtest: write %s: %w", rec.outPath, err)
			return
		}
	}
	if rec.plot != nil {
		if err := rec.plot.Add(r); err != nil {
			rec.err = fmt.Errorf("loadtest: plot: %w", err)
		}
	}
}

// close flushes the results file and writes the plot.
func (rec *recorder) close() error {
	err := rec.err
	if rec.outFile != nil {
		err = errors.Join(err, rec.outBuf.Flush(), rec.outFile.Close())
	}
	if rec.plot != nil {
		rec.plot.Close()
		err = errors.Join(err, rec.writePlot())
	}
	return err
}

func (rec *recorder) writePlot() error {
	f, err := os.Create(rec.plotPath)
	if err != nil {
		return fmt.Errorf("loadtest: plot: %w", err)
	}
	w := bufio.NewWriter(f)
	_, err = rec.plot.WriteTo(w)
	return errors.Join(err, w.Flush(), f.Close())
}

// abort releases files when the run does not start.
func (rec *recorder) abort() {
	if rec.outFile != nil {
		_ = rec.outFile.Close()
	}
}

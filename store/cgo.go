//go:build cgo

package store

import (
	"errors"

	"github.com/mattn/go-sqlite3"
)

// cgoEnabled is whether the SQLite driver was compiled in.
const cgoEnabled = true

// isBusy reports whether err is SQLite's SQLITE_BUSY: another connection
// holds the lock that was needed.
func isBusy(err error) bool {
	var e sqlite3.Error
	return errors.As(err, &e) && e.Code == sqlite3.ErrBusy
}

//go:build !cgo

package store

// cgoEnabled is whether the SQLite driver was compiled in. Without cgo,
// go-sqlite3 builds a stub whose error message does not say what to do.
const cgoEnabled = false

// isBusy is never true: without cgo, Open stops before any query.
func isBusy(error) bool { return false }

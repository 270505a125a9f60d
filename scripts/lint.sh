#!/usr/bin/env bash
# scripts/lint.sh: the static checks, on the main module and on bench/.
#
#   gofmt        every tracked .go file is formatted
#   go vet       the compiler's own checks
#   staticcheck  honnef.co/go/tools, pinned below: lost errors, nil
#                contexts, misused sync and time APIs, dead code
#
# staticcheck is built from the Go module proxy with `go run pkg@version`
# (cached after the first run), so no binary is downloaded and the main
# module's go.mod does not depend on it. A finding that is not a bug is
# suppressed where it occurs, with //lint:ignore CHECK reason.
set -euo pipefail
cd "$(dirname "$0")/.."

# staticcheck 2026.2.2, which supports (and needs) Go 1.26, the go.mod version.
STATICCHECK=honnef.co/go/tools/cmd/staticcheck@v0.8.2

echo "lint: gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"
	echo "$unformatted"
	exit 1
fi

echo "lint: go vet"
go vet ./...
(cd bench && go vet ./...)

echo "lint: staticcheck ($STATICCHECK)"
go run "$STATICCHECK" ./...
(cd bench && go run "$STATICCHECK" ./...)
echo "lint: ok"

#!/usr/bin/env bash
# scripts/fuzz.sh: runs every fuzz target (func FuzzXxx in any package of
# the main module) for a short, fixed time, one at a time, and prints the
# executions each made. Their seed corpora (testdata/fuzz and f.Add) also
# run in every `go test`, as ordinary tests.
#
#   FUZZTIME=10s   how long each target fuzzes (go test -fuzztime)
#
# A failure stops the run: go test has then written the failing input to
# the package's testdata/fuzz/<target>/ directory. Commit it with the fix,
# so that it runs in every `go test` from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-10s}

# "./pkg FuzzName" per target, from the test files of the main module
# (bench/ is a module of its own). Read from the source rather than with
# go test -list, which would run every package's TestMain.
targets=$(git ls-files -co --exclude-standard -- '*_test.go' ':!bench/' |
	xargs grep -oE '^func Fuzz[A-Za-z0-9_]*' |
	sed -E 's#^(.*)/[^/]*:func (Fuzz.*)$#./\1 \2#' | sort)
if [ -z "$targets" ]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
summary=()
while read -r pkg name; do
	echo "fuzz: $name ($pkg), $FUZZTIME"
	if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$pkg" >"$log" 2>&1; then
		tail -n 40 "$log"
		echo "fuzz: $name FAILED; the failing input is in the package's testdata/fuzz/$name/" >&2
		exit 1
	fi
	# The last progress line: "fuzz: elapsed: 10s, execs: 12345 (1234/sec), ..."
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2 || true)
	if [ -z "$execs" ]; then
		# The time went on running the corpus once, for coverage.
		execs="0 (only $(grep -o 'baseline coverage: [0-9/]*' "$log" | tail -n 1 | cut -d' ' -f3 || true) of the corpus for coverage)"
	fi
	summary+=("$(printf '%-26s %-16s %s' "$name" "$pkg" "$execs")")
done <<<"$targets"

echo
printf '%-26s %-16s %s\n' "target" "package" "executions in $FUZZTIME"
printf '%s\n' "${summary[@]}"

#!/usr/bin/env bash
# scripts/fuzz.sh: runs every fuzz target (func FuzzXxx in any package of
# the main module) for a fixed number of inputs, one at a time, and prints
# how long each took. Their seed corpora (testdata/fuzz and f.Add) also run
# in every `go test`, as ordinary tests.
#
#   FUZZTIME=20000x   the budget of each target (go test -fuzztime)
#
# The budget is a count, not a duration: with a duration, Go 1.26's fuzzing
# coordinator can report "context deadline exceeded" as a failure when the
# time runs out while a worker is busy, and it writes no failing input then
# (go.dev/issue/75804, fixed in Go 1.27). A count has no deadline to race.
#
# A failure stops the run: go test has then written the failing input to
# the package's testdata/fuzz/<target>/ directory. Commit it with the fix,
# so that it runs in every `go test` from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-20000x}

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
	t0=$(date +%s)
	if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$pkg" >"$log" 2>&1; then
		tail -n 40 "$log"
		echo "fuzz: $name FAILED; the failing input is in the package's testdata/fuzz/$name/" >&2
		exit 1
	fi
	summary+=("$(printf '%-26s %-16s %ss' "$name" "$pkg" "$(($(date +%s) - t0))")")
done <<<"$targets"

echo
printf '%-26s %-16s %s\n' "target" "package" "time for $FUZZTIME"
printf '%s\n' "${summary[@]}"

#!/usr/bin/env bash
# scripts/demo-check.sh [N]: the short load tests. N times each (default 3):
#   seckill demo                                  must pass (nothing oversold)
#   seckill demo -lock none  -expect-oversell     must catch the oversell
#   seckill demo -lock local -expect-oversell     must catch it too (2 replicas,
#                                                 each a process of its own)
# Each is a burst of 20 buyers per item at once (the demo's default: 2,000 for 100),
# with nothing injected: the burst alone is what makes the broken modes
# oversell. The redis runs' histories must also check linearizable. The
# binary is built once; porcupine's visualizations of the broken modes'
# violations go to a temporary directory removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin=$tmp/seckill
go build -o "$bin" .
export TMPDIR=$tmp

# check WHAT ARGS...: runs `seckill demo ARGS` n times; each must pass.
check() {
	local what=$1; shift
	for i in $(seq "$n"); do
		if ! out=$("$bin" demo "$@" 2>&1); then
			echo "$out"
			echo "demo-check: FAIL: $what, run $i of $n"
			exit 1
		fi
		echo "demo-check: ok: $what, run $i of $n: $(echo "$out" | grep -E '^demo: (PASS|FAIL)' | tail -1)"
	done
}
check "redis lock, nothing oversold"
check "no lock, oversell caught" -lock none -expect-oversell
check "local lock on 2 replica processes, oversell caught" -lock local -expect-oversell

#!/usr/bin/env bash
# scripts/demo-check.sh [N]: the short load tests. N times each (default 3):
#   seckill demo                                  must pass (nothing oversold)
#   seckill demo -lock none  -expect-oversell     must catch the oversell
#   seckill demo -lock local -expect-oversell     must catch it too (2 replicas;
#                                                 300 items, 6,000 buyers), in
#                                                 one of two sales
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

# check WHAT TRIES ARGS...: runs `seckill demo ARGS` n times; each run passes
# if one of its first TRIES sales passes.
check() {
	local what=$1 tries=$2; shift 2
	for i in $(seq "$n"); do
		for try in $(seq "$tries"); do
			if out=$("$bin" demo "$@" 2>&1); then
				break
			fi
			if [ "$try" = "$tries" ]; then
				echo "$out"
				echo "demo-check: FAIL: $what, run $i of $n"
				exit 1
			fi
			echo "demo-check: $what, run $i of $n: sale $try missed, $(echo "$out" | grep -E '^demo: (PASS|FAIL)' | tail -1)"
		done
		echo "demo-check: ok: $what, run $i of $n: $(echo "$out" | grep -E '^demo: (PASS|FAIL)' | tail -1)"
	done
}
check "redis lock, nothing oversold" 1
check "no lock, oversell caught" 1 -lock none -expect-oversell
# The local lock oversells only when the two replicas' purchases overlap
# (one reads the stock between the other's read and write-back). When the
# first ones do not, a sale can stay in a regime where each purchase is
# over in a fraction of a millisecond and sell out without one overlap: in
# about 1 sale of 20 here, at 100 or at 300 items. A run of this control
# therefore gets a second sale, and only a checker that misses both fails.
check "local lock on 2 replicas, oversell caught" 2 -lock local -expect-oversell -stock 300 -buyers 6000

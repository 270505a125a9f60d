#!/usr/bin/env bash
# scripts/demo-check.sh [N]: the short load tests. N times each (default 3):
#   seckill demo                                  must pass (nothing oversold)
#   seckill demo -lock none  -expect-oversell     must catch the oversell
#   seckill demo -lock local -expect-oversell     must catch it too (2 replicas,
#                                                 each a process of its own)
#   seckill demo -window 500ms ...                must pass: buyers pay, cancel and
#                                                 lapse, units come back and sell again
#   ... -unsafe-pay-late, -unsafe-expiry unchecked, -unsafe-expiry unlocked
#       -expect-oversell                          each must be caught
# The first three are a burst of 20 buyers per item at once (the demo's
# default: 2,000 for 100), with nothing injected: the burst alone is what
# makes the broken modes oversell. The reservations' sales last four
# windows; the unlocked expiry's sells 500 units to 400 buyers, so that
# the stock is never out and the purchases in its pause are lost. The redis runs' histories must also check linearizable. The
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
life=(-window 500ms -buyers 400 -stock 20)
check "payment window: buyers pay, cancel and lapse" "${life[@]}"
check "payment after the window accepted, caught" "${life[@]}" -unsafe-pay-late -expect-oversell
check "expiry without the state check, caught" "${life[@]}" -unsafe-expiry unchecked -expect-oversell
check "expiry outside the lock, caught" "${life[@]}" -stock 500 -unsafe-expiry unlocked -expect-oversell

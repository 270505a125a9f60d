#!/usr/bin/env bash
# scripts/design-check.sh [N]: the designs without a lock, N times each
# (default 3): `seckill demo -design X` with reads and restocks mixed in,
# for conditional, redis-counter and redis-counter-async. Each must pass
# the load test's invariants and the linearizability check: none of them
# is a broken control (docs/designs.md). The binary is built once.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin=$tmp/seckill
go build -o "$bin" .
export TMPDIR=$tmp

for design in conditional redis-counter redis-counter-async; do
	for i in $(seq "$n"); do
		if ! out=$("$bin" demo -design "$design" -buyers 1000 -mix reads=10%,restocks=1% 2>&1); then
			echo "$out"
			echo "design-check: FAIL: $design, run $i of $n"
			exit 1
		fi
		echo "design-check: ok: $design, run $i of $n: $(echo "$out" | grep -E 'linearizable: ' | head -1 | sed 's/^ *//')"
	done
done

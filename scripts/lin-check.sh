#!/usr/bin/env bash
# scripts/lin-check.sh [N]: the linearizability check and its control, N
# times each (default 3), on the demo's mixed sale: 1,000 requests, 10% of
# them reads, a restock per 100 answers (paced by count, so that a fast
# sale has them too: at least one must run), at most 8 in flight, on 2
# replicas.
#   seckill demo -mix ...                              must say "linearizable: yes"
#   seckill demo -mix ... -lock none  -expect-oversell must say "linearizable: NO"
#   seckill demo -mix ... -lock local -expect-oversell must say "linearizable: NO"
# The broken modes' lost updates must be caught by the check itself, not
# only by the counts. The binary is built once; porcupine's visualizations
# of the violations go to a temporary directory removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin=$tmp/seckill
go build -o "$bin" .
export TMPDIR=$tmp
mix=(-buyers 1000 -mix reads=10%,restocks=1%)

check() {
	local what=$1 want=$2; shift 2
	for i in $(seq "$n"); do
		local start=$SECONDS out
		if ! out=$("$bin" demo "${mix[@]}" "$@" 2>&1) || ! grep -q "^  linearizable: $want" <<<"$out"; then
			echo "$out"
			echo "lin-check: FAIL: $what, run $i of $n: want \"linearizable: $want\""
			exit 1
		fi
		restocks=$(sed -n 's/.* reads and \([0-9]*\) restocks mixed in.*/\1/p' <<<"$out" | head -1)
		if [ "${restocks:-0}" -eq 0 ]; then
			echo "$out"
			echo "lin-check: FAIL: $what, run $i of $n: fault not injected: no restock ran"
			exit 1
		fi
		echo "lin-check: ok: $what, run $i of $n ($((SECONDS - start))s, $restocks restocks): $(grep '^  linearizable:' <<<"$out" | tail -1 | cut -c3-160)"
	done
}
check "redis lock, linearizable" yes
check "no lock, violation caught" NO -lock none -expect-oversell
check "local lock on 2 replicas, violation caught" NO -lock local -expect-oversell

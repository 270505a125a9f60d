#!/usr/bin/env bash
# scripts/cross-check.sh: the code builds and vets on the systems Go
# developers use, not only on this one.
#
# For each GOOS/GOARCH below, without cgo: go vet on both modules (the
# main one and bench/), test files included, and go build of the seckill
# command. Per-system files (procutil's guards, fakeclock, the /proc
# readers) compile only where they are built, so a Linux-only call slips
# in unseen without this. It compiles and runs nothing: seconds, with a
# warm build cache.
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(darwin/arm64 darwin/amd64 windows/amd64 linux/arm64)
for t in "${targets[@]}"; do
	export GOOS=${t%/*} GOARCH=${t#*/} CGO_ENABLED=0
	echo "cross-check: $t"
	go vet ./...
	go build -o /dev/null .
	(cd bench && go vet ./...)
done
echo "cross-check: ok (${targets[*]})"

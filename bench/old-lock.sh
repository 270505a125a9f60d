#!/usr/bin/env bash
# old-lock.sh COMMIT: puts package lock as it was at COMMIT into
# testdata/old/lock (ignored by git, and by go vet ./... and the linters,
# as every testdata directory is), its imports rewritten to live there, so
# that the benchmarks built with -tags oldlock run it beside today's lock,
# in one process, against one redis-server (interleaved_test.go):
#
#	./old-lock.sh a95df49
#	go test -tags oldlock -run '^$' -bench Interleaved -benchtime 20x
set -euo pipefail
cd "$(dirname "$0")"
commit=${1:?usage: $0 COMMIT}
dir=testdata/old
rm -rf "$dir"
mkdir -p "$dir"
git -C .. archive "$commit" lock | tar -x -C "$dir"
find "$dir" -name '*_test.go' -delete
find "$dir" -name '*.go' -exec sed -i \
	's#"github.com/seckill-ref/seckill/lock#"github.com/seckill-ref/seckill/bench/testdata/old/lock#' {} +
echo "$dir/lock is package lock at $(git -C .. rev-parse --short "$commit")"

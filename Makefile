# The project's checks, as make targets; each is a script or a go command
# that also runs on its own. `make help` lists them.
.PHONY: help test test-short soak lint cross-check fuzz bench compose-check ci

FUZZTIME ?= 20000x
BENCH ?= .
BENCHTIME ?= 1s

help: ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

test: ## every test under -race, real Redis, PostgreSQL and Chromium (./scripts/test.sh)
	./scripts/test.sh

test-short: ## the fast inner loop: go test -short, without the multi-process suites
	go test -short -count=1 ./...

soak: ## the long forms: the fault suite's bigger sales, each at least 15 s, and 100 runs of the hand-off check
	FAULTTEST_LONG=1 go test -race -count=1 -timeout 60m ./internal/faulttest
	go test -race -count=1 -run TestNoMissedHandOff ./lock -handoff-runs 100

lint: ## gofmt, go vet and staticcheck on both modules
	./scripts/lint.sh

cross-check: ## go vet and go build for macOS, Windows and linux/arm64, without cgo (./scripts/cross-check.sh)
	./scripts/cross-check.sh

fuzz: ## every fuzz target for FUZZTIME inputs (default 20000x)
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

bench: ## benchmarks matching BENCH (default all) for BENCHTIME, both modules
	go test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) ./...
	cd bench && go test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) ./...

compose-check: ## the docker-compose stack under load (./scripts/compose-check.sh; needs Docker)
	./scripts/compose-check.sh

ci: ## everything CI runs
	./.ci/run

# The project's checks, as make targets; each is a script that also runs
# on its own.
.PHONY: test lint fuzz ci

FUZZTIME ?= 10s

test: ## go test -race ./... against real redis-server processes
	./scripts/test.sh

lint: ## gofmt, go vet and staticcheck on both modules
	./scripts/lint.sh

fuzz: ## every fuzz target for FUZZTIME (default 10s)
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

ci: ## everything CI runs
	./.ci/run

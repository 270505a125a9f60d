# The project's checks, as make targets; each is a script that also runs
# on its own.
.PHONY: test lint fuzz ci

FUZZTIME ?= 20000x

test: ## go test -race ./... against real redis-server processes
	./scripts/test.sh

lint: ## gofmt, go vet and staticcheck on both modules
	./scripts/lint.sh

fuzz: ## every fuzz target for FUZZTIME inputs (default 20000x)
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

ci: ## everything CI runs
	./.ci/run

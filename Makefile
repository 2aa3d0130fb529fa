# gatehouse — build and test entry points. `make test` is what CI runs.
SHELL := /bin/bash
GO ?= go
# Debian packages the tests need: a real ACME server and a real browser.
DEB_PACKAGES := pebble chromium
FUZZTIME ?= 20000x

.PHONY: test deps vet fmt-check staticcheck unit fuzz fuzz-long bench bench-load build demo

test: deps vet fmt-check staticcheck unit fuzz bench

build:
	$(GO) build ./...

demo:
	$(GO) run ./cmd/gatehouse demo

# deps installs whatever Debian package the tests need and is missing.
deps:
	@./scripts/deps.sh $(DEB_PACKAGES)

vet:
	$(GO) vet ./...

# staticcheck at a pinned version, fetched through the module proxy
# without touching go.mod.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
staticcheck:
	$(GO) run $(STATICCHECK) ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test -race -timeout 20m ./...

# fuzz runs every Fuzz target briefly, so the internet-facing parsers are
# exercised beyond their seed corpus on every CI run.
fuzz:
	@FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

# fuzz-long is the deeper run to make before submitting (~20 min): CI's
# few random executions per target can find what a short local run did
# not, and then nothing lands. Each target gets up to 1.5M executions or
# FUZZCAP seconds; every target runs, and any failing input fails it.
FUZZCAP ?= 90
fuzz-long:
	@FUZZTIME=1500000x FUZZCAP=$(FUZZCAP) FUZZCAP_OK=1 ./scripts/fuzz.sh

# bench runs every Go benchmark once (part of test, so they cannot rot),
# with -short: a benchmark may then leave out its largest sizes. The load
# harness against nginx and HAProxy is `go run ./bench` (see bench/README.md).
bench:
	$(GO) test -short -run '^$$' -bench . -benchtime=1x ./...

# bench-load is the side-by-side harness (as root: it installs nginx,
# HAProxy and wrk from Debian when missing); results in BENCHMARKS.md.
bench-load:
	$(GO) run ./bench -perf

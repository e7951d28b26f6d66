# The one command that runs every test: Go unit, golden and integration
# tests, the TypeScript SDK interop suite and the console's browser suite
# (both driven from the Go tests), and each fuzz target for a few thousand
# inputs beyond its seed corpus. It starts Redis and PostgreSQL first when
# they are not running (scripts/services).
.PHONY: test bench fuzz

FUZZ_TARGETS = .:FuzzSplitArgs ./internal/strictjson:FuzzDecodeJSON ./audit:FuzzLink ./audit:FuzzAuditChain ./seal:FuzzCanonical ./seal:FuzzWriteString ./seal:FuzzOpen ./config:FuzzParse
# A count, not a duration: Go 1.26's fuzzing coordinator can fail a target
# that found nothing with "context deadline exceeded" when a duration ends
# (go.dev/issue/75804, fixed in Go 1.27); a count has no deadline to race.
FUZZTIME ?= 10000x

test:
	bash scripts/services
	npm ci --prefix interop --no-audit --no-fund --loglevel=error
	npm ci --prefix conformance --no-audit --no-fund --loglevel=error
	npm ci --prefix console/e2e --no-audit --no-fund --loglevel=error
	@unformatted="$$(gofmt -l .)"; if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	go vet ./...
	$(MAKE) --no-print-directory fuzz
	go test -count=1 -timeout 25m ./...
	cd deploy && go vet ./... && go test -count=1 ./...

# make fuzz FUZZTIME=10m runs each target for ten minutes (a duration: read
# a bare "context deadline exceeded" with no crasher written as the race
# above, not a finding).
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} for $(FUZZTIME)"; \
		out=$$(go test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) -timeout 0 -parallel 1 "$${t%%:*}" 2>&1) || { echo "$$out"; exit 1; }; \
	done

# Benchmarks of the gate, the seal, the audit chain and the token stores
# (Redis on 127.0.0.1:6379). Fixed iteration counts keep a run short on two
# cores.
bench:
	go test -run '^$$' -bench . -benchmem -benchtime 100000x . ./seal ./audit
	go test -run '^$$' -bench . -benchmem -benchtime 5000x ./redis

# Release archives for every platform interlock supports: a static binary
# (CGO_ENABLED=0, -trimpath, -s -w, the version from git describe stamped
# in) and the README, a .tar.gz per platform (a .zip for Windows), into
# dist/ with their SHA-256 checksums. .goreleaser.yaml makes the same
# archives; deploy/chart/release_test.go checks that the two agree. Not
# part of make test.
VERSION ?= $(shell git describe --tags --always --dirty)
PLATFORMS = linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64

.PHONY: release
release:
	rm -rf dist && mkdir -p dist
	@for p in $(PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; ext=; [ $$os = windows ] && ext=.exe; \
		name=interlock-$(VERSION)-$$os-$$arch; dir=dist/$$name; \
		echo "build $$name"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o $$dir/interlock$$ext ./cmd/interlock || exit 1; \
		cp README.md $$dir/ || exit 1; \
		if [ $$os = windows ]; then (cd $$dir && zip -q ../$$name.zip interlock$$ext README.md) || exit 1; \
		else tar -C $$dir -czf dist/$$name.tar.gz interlock README.md || exit 1; fi; \
		rm -rf $$dir; \
	done
	cd dist && if command -v sha256sum >/dev/null; then sha256sum interlock-* ; else shasum -a 256 interlock-* ; fi > SHA256SUMS

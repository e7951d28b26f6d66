# The one command that runs every test: Go unit, golden and integration
# tests, the TypeScript SDK interop suite and the console's browser suite
# (both driven from the Go tests).
.PHONY: test bench

test:
	npm ci --prefix interop --no-audit --no-fund --loglevel=error
	npm ci --prefix console/e2e --no-audit --no-fund --loglevel=error
	@unformatted="$$(gofmt -l .)"; if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	go vet ./...
	go test -count=1 ./...

# Benchmarks of the gate, the seal and the token stores (Redis on
# 127.0.0.1:6379). Fixed iteration counts keep a run short on two cores.
bench:
	go test -run '^$$' -bench . -benchmem -benchtime 100000x . ./seal
	go test -run '^$$' -bench . -benchmem -benchtime 5000x ./redis

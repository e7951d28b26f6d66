# The one command that runs every test: Go unit, golden and integration
# tests, and the TypeScript SDK interop suite (driven from the Go tests).
.PHONY: test bench

test:
	npm ci --prefix interop --no-audit --no-fund --loglevel=error
	@unformatted="$$(gofmt -l .)"; if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	go vet ./...
	go test -count=1 ./...

bench:
	go test -run '^$$' -bench . -benchmem -benchtime 20000x .

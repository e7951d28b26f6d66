package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// proxyVariant is another MCP proxy in front of the HTTP echo server, when
// BENCH_PROXY names its binary and BENCH_PROXY_ADAPTER a program run as
//
//	ADAPTER UPSTREAM_URL CONFIG_FILE
//
// that writes the proxy's config for that upstream to CONFIG_FILE and
// prints the MCP URL clients use. The proxy runs as `BENCH_PROXY
// $BENCH_PROXY_ARGS` with {config} in the arguments replaced by the file.
func proxyVariant(s *setup) *variant {
	bin, adapter := os.Getenv("BENCH_PROXY"), os.Getenv("BENCH_PROXY_ADAPTER")
	if bin == "" || adapter == "" {
		return nil
	}
	args := strings.Fields(os.Getenv("BENCH_PROXY_ARGS"))
	if len(args) == 0 {
		args = []string{"--config", "{config}"}
	}
	return &variant{name: "proxy:" + filepath.Base(bin), base: "direct-http", start: func() (*served, error) {
		return s.beforeEcho(func(upstream string) (*httpServed, error) {
			cfg := filepath.Join(s.dir, "proxy-config")
			out, err := exec.Command(adapter, upstream, cfg).Output()
			if err != nil {
				return nil, err
			}
			url := strings.TrimSpace(string(out))
			var real []string
			for _, a := range args {
				real = append(real, strings.ReplaceAll(a, "{config}", cfg))
			}
			// The proxy says nothing we can rely on: wait until its port
			// answers by connecting, through the URL the adapter gave.
			return startAndWait(exec.Command(bin, real...), url)
		})
	}}
}

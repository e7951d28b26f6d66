package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// proxyVariants are another MCP proxy in the topologies interlock is
// measured in, when BENCH_PROXY names its binary and BENCH_PROXY_ADAPTER a
// program run as
//
//	ADAPTER UPSTREAM CONFIG_FILE
//
// that writes the proxy's config for that upstream to CONFIG_FILE and
// prints the MCP URL clients use. UPSTREAM is the HTTP echo server's URL
// (variant proxy:NAME-http-upstream, beside interlock-http-upstream), or
// "stdio:" and the command line of an echo child, its words separated by
// spaces (variant proxy:NAME, beside interlock-http). The proxy runs as
// `BENCH_PROXY $BENCH_PROXY_ARGS` with {config} in the arguments replaced
// by the file.
func proxyVariants(s *setup) []*variant {
	bin, adapter := os.Getenv("BENCH_PROXY"), os.Getenv("BENCH_PROXY_ADAPTER")
	if bin == "" || adapter == "" {
		return nil
	}
	args := strings.Fields(os.Getenv("BENCH_PROXY_ARGS"))
	if len(args) == 0 {
		args = []string{"--config", "{config}"}
	}
	front := func(upstream string) (*httpServed, error) {
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
	}
	name := "proxy:" + filepath.Base(bin)
	return []*variant{
		{name: name, base: "direct-http", start: func() (*served, error) {
			return servedOf(front("stdio:" + s.self + " echo"))
		}},
		{name: name + "-http-upstream", base: "direct-http", start: func() (*served, error) {
			return s.beforeEcho(false, front)
		}},
	}
}

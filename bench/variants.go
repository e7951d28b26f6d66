package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// setup is what every variant needs: this program (the echo server),
// interlock, and a scratch directory.
type setup struct {
	self, interlock, dir string
	// pprof, when set, is passed to every gateway as --pprof, to profile
	// one variant (run it alone with -only) while it is measured.
	pprof string
	// allowedCalls, when set, is every gateway's audit.allowed_calls.
	allowedCalls string
	// perClient gives every client session a stdio child of its own
	// (per_client) instead of the one the gateway shares.
	perClient bool
}

// variant is one way of reaching the echo tool.
type variant struct {
	name string
	// base names the direct variant on the same transport, for ratios.
	base string
	// start starts whatever serves the variant and returns a way to open
	// client sessions, the processes whose CPU counts as the server's, and
	// a stop func.
	start func() (*served, error)
	// token measures the confirm-token handshake instead of the allow path.
	token bool
}

// served is a running variant.
type served struct {
	connect func(ctx context.Context) (*mcp.ClientSession, error)
	// pids are the processes measured for CPU (the gateway, or the
	// server itself for a direct call). A stdio variant adds one per
	// session.
	pids []int
	stop func()
}

// maxKeys is how many principals the token variant's gateway knows.
const maxKeys = 64

func benchKey(i int) string { return fmt.Sprintf("bench-key-%02d-%s", i, strings.Repeat("k", 32)) }

// keysConfig is the auth section with a key per principal, put after the
// upstream (the policy's %s sits in the upstream's mapping).
var keysConfig = func() string {
	var b strings.Builder
	b.WriteString("auth:\n  keys:\n")
	for i := range maxKeys {
		sum := sha256.Sum256([]byte(benchKey(i)))
		fmt.Fprintf(&b, "    - {sha256: %s, principal: client-%02d}\n", hex.EncodeToString(sum[:]), i)
	}
	return b.String()
}()

// bearer sends an API key with every request.
type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

const policy = `upstreams:
  - name: echo
    %s
rules:
  - name: writes
    match: {tools: [echo_write]}
    mode: token
`

func (s *setup) config(upstream string) string {
	path := filepath.Join(s.dir, fmt.Sprintf("config-%d.yaml", time.Now().UnixNano()))
	cfg := fmt.Sprintf(policy, upstream)
	if s.allowedCalls != "" {
		cfg += "audit:\n  allowed_calls: " + s.allowedCalls + "\n"
	}
	check(os.WriteFile(path, []byte(cfg), 0o600))
	return path
}

func (s *setup) stdioUpstream() string {
	up := fmt.Sprintf("command: [%q, echo]", s.self)
	if s.perClient {
		up += "\n    per_client: true"
	}
	return up
}

func (s *setup) variants() []*variant {
	vs := []*variant{
		{name: "direct-stdio", base: "direct-stdio", start: func() (*served, error) {
			return stdioServed(func() *exec.Cmd { return exec.Command(s.self, "echo") }), nil
		}},
		{name: "interlock-stdio", base: "direct-stdio", start: func() (*served, error) {
			cfg := s.config(s.stdioUpstream())
			return stdioServed(func() *exec.Cmd { return s.gateway("serve", "--stdio", "--config", cfg) }), nil
		}},
		{name: "direct-http", base: "direct-http", start: func() (*served, error) {
			return servedOf(s.echoHTTP(false))
		}},
		{name: "interlock-http", base: "direct-http", start: func() (*served, error) {
			return servedOf(s.gatewayHTTP(s.stdioUpstream()))
		}},
		{name: "direct-2026", base: "direct-2026", start: func() (*served, error) {
			return latest(s.echoHTTP(true))
		}},
		{name: "interlock-2026", base: "direct-2026", start: func() (*served, error) {
			return latest(s.gatewayHTTP(s.stdioUpstream()))
		}},
		{name: "interlock-http-upstream", base: "direct-http", start: func() (*served, error) {
			return s.beforeEcho(false, func(url string) (*httpServed, error) { return s.gatewayHTTP("url: " + url) })
		}},
		{name: "interlock-2026-http-upstream", base: "direct-2026", start: func() (*served, error) {
			return s.beforeEcho(true, func(url string) (*httpServed, error) { return latestHTTP(s.gatewayHTTP("url: " + url)) })
		}},
		{name: "sdk-proxy-http-upstream", base: "direct-http", start: func() (*served, error) {
			return s.beforeEcho(false, func(url string) (*httpServed, error) {
				cmd := exec.Command(s.self, "sdkproxy", "-upstream", url)
				out, err := cmd.StdoutPipe()
				if err != nil {
					return nil, err
				}
				return listening(cmd, out, regexp.MustCompile(`^(http://\S+)$`))
			})
		}},
		{name: "token-http", base: "direct-http", token: true, start: func() (*served, error) {
			// Each client is a principal of its own: a new confirm token
			// replaces the caller's earlier one for the same tool.
			h, err := s.gatewayHTTP(s.stdioUpstream() + "\n" + keysConfig)
			if err != nil {
				return nil, err
			}
			var next atomic.Int64
			h.connect = func(ctx context.Context) (*mcp.ClientSession, error) {
				key := benchKey(int(next.Add(1)) % maxKeys)
				client := &http.Client{Transport: bearer{key}}
				return mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url, HTTPClient: client},
					&mcp.ClientSessionOptions{ProtocolVersion: sessionProtocol})
			}
			return h.served, nil
		}},
	}
	return append(vs, proxyVariants(s)...)
}

// beforeEcho starts the echo server on HTTP (without sessions when
// stateless) and, in front of it, what front starts given the echo
// server's URL; stopping the front stops both.
func (s *setup) beforeEcho(stateless bool, front func(url string) (*httpServed, error)) (*served, error) {
	up, err := s.echoHTTP(stateless)
	if err != nil {
		return nil, err
	}
	f, err := front(up.url)
	if err != nil {
		up.stop()
		return nil, err
	}
	stop := f.stop
	f.stop = func() { stop(); up.stop() }
	return f.served, nil
}

// gateway prepares `interlock ARGS` with dry run off and its own data
// directory.
func (s *setup) gateway(args ...string) *exec.Cmd {
	data, err := os.MkdirTemp(s.dir, "data")
	check(err)
	if s.pprof != "" && args[0] == "serve" {
		args = append(args, "--pprof", s.pprof)
	}
	cmd := exec.Command(s.interlock, append(args, "--data", data)...)
	cmd.Env = append(os.Environ(), "MCP_DRY_RUN=false", "INTERLOCK_SECRET="+strings.Repeat("b", 43))
	return cmd
}

func stdioServed(newCmd func() *exec.Cmd) *served {
	sv := &served{}
	var cmds []*exec.Cmd
	sv.connect = func(ctx context.Context) (*mcp.ClientSession, error) {
		cmd := newCmd()
		cmd.Stderr = io.Discard
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, cmd)
		sv.pids = append(sv.pids, cmd.Process.Pid)
		return cs, nil
	}
	sv.stop = func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	return sv
}

func servedOf(h *httpServed, err error) (*served, error) {
	if err != nil {
		return nil, err
	}
	return h.served, nil
}

// httpServed is a variant served over HTTP by one process.
type httpServed struct {
	*served
	url string
}

// listening starts cmd and waits for re to match a line of its output.
func listening(cmd *exec.Cmd, out io.Reader, re *regexp.Regexp) (*httpServed, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urlc <- m[1]
			}
		}
	}()
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	select {
	case url := <-urlc:
		hs := &httpServed{url: url, served: &served{pids: []int{cmd.Process.Pid}, stop: stop}}
		hs.connect = connectHTTP(url, sessionProtocol)
		return hs, nil
	case <-time.After(30 * time.Second):
		stop()
		return nil, fmt.Errorf("%s did not say where it listens", cmd.Path)
	}
}

// sessionProtocol is the protocol the HTTP variants' clients speak unless
// a variant says otherwise: the last one with sessions, which every server
// here serves, so that a direct call and a call through a proxy take the
// same path through the SDK. (A client left to choose speaks 2026-07-28
// to a server that offers it, as interlock does, and 2025-11-25 to one
// that does not, as a stateful SDK server: the two would not compare.)
const sessionProtocol = "2025-11-25"

// connectHTTP opens client sessions with the MCP endpoint at url, in
// protocol (or the latest both sides speak, when empty).
func connectHTTP(url, protocol string) func(context.Context) (*mcp.ClientSession, error) {
	var opts *mcp.ClientSessionOptions
	if protocol != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: protocol}
	}
	return func(ctx context.Context) (*mcp.ClientSession, error) {
		return mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, opts)
	}
}

// latest has h's clients speak the latest protocol, 2026-07-28, without
// sessions.
func latest(h *httpServed, err error) (*served, error) {
	if h, err = latestHTTP(h, err); err != nil {
		return nil, err
	}
	return h.served, nil
}

// latestHTTP makes h's clients speak 2026-07-28, without sessions.
func latestHTTP(h *httpServed, err error) (*httpServed, error) {
	if err != nil {
		return nil, err
	}
	h.connect = connectHTTP(h.url, "")
	return h, nil
}

func (s *setup) echoHTTP(stateless bool) (*httpServed, error) {
	args := []string{"echo", "-http", "127.0.0.1:0"}
	if stateless {
		args = append(args, "-stateless")
	}
	cmd := exec.Command(s.self, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	return listening(cmd, out, regexp.MustCompile(`^(http://\S+)$`))
}

func (s *setup) gatewayHTTP(upstream string, extra ...string) (*httpServed, error) {
	cmd := s.gateway(append([]string{"serve", "--listen", "127.0.0.1:0", "--config", s.config(upstream)}, extra...)...)
	out, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	return listening(cmd, out, regexp.MustCompile(`serving\s+(http://\S+/mcp)`))
}

package config

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/interlock-mcp/interlock/policy"
)

// The upstreams section: the servers the gateway fronts, each a child
// process or a streamable-HTTP URL, with its resilience settings.

// Upstream is an MCP server behind the gateway: a child it starts and talks
// to over stdio (Command), or a server it reaches over streamable HTTP
// (URL).
type Upstream struct {
	Name string `yaml:"name"`
	// Command is the program and its arguments.
	Command []string `yaml:"command"`
	// Env adds variables to the child's environment; ${VAR} in a value is
	// read from the gateway's environment at load.
	Env map[string]string `yaml:"env"`
	// Dir is the child's working directory.
	Dir string `yaml:"dir"`
	// URL is the MCP endpoint of an HTTP upstream.
	URL string `yaml:"url"`
	// Headers are sent with every request to an HTTP upstream, such as
	// Authorization; ${VAR} in a value is read from the gateway's
	// environment at load.
	Headers map[string]string `yaml:"headers"`
	// Prefix is put before each of this upstream's tool names, to resolve two
	// upstreams that expose the same name.
	Prefix string `yaml:"prefix"`
	// Timeout bounds one attempt of a call to the upstream, as a Go
	// duration; 30s when absent. An attempt that takes longer is
	// UPSTREAM_TIMEOUT.
	Timeout string `yaml:"timeout"`
	// CallTimeout is Timeout, parsed.
	CallTimeout time.Duration `yaml:"-"`
	// Retries is how many times a call of a read-only or idempotent tool
	// is tried again after a transient failure (2 when absent, 0 for none);
	// other calls are never repeated.
	Retries *int `yaml:"retries"`
	// Breaker opens the circuit after Failures consecutive failures (10)
	// and lets one call try again Delay later (60s).
	Breaker *Breaker `yaml:"breaker"`
	// MaxInFlight bounds the calls in flight to the upstream (100); one
	// more is BULKHEAD_FULL at once.
	MaxInFlight int `yaml:"max_in_flight"`
	// Rate bounds calls per second to the upstream; none when absent.
	Rate float64 `yaml:"rate"`
	// TrustHints, when false, has the gateway ignore the annotations this
	// upstream claims: its tools are unannotated (destructive, open-world)
	// unless a rule's annotations override says otherwise. True when absent.
	TrustHints *bool `yaml:"trust_hints"`
	// PerClient gives each client session of a protocol before 2026-07-28
	// a link of its own to this upstream (for a child, a process of its
	// own), for servers that keep state per connection or must know
	// exactly which client asks. By default all clients share one link.
	PerClient bool `yaml:"per_client"`
	// InheritEnv gives a child the gateway's whole environment (less the
	// sealing keys) instead of the minimal base; false when absent.
	InheritEnv bool `yaml:"inherit_env"`
	// PassErrors, when true, passes the upstream's JSON-RPC errors to the
	// client as a direct connection gives them (its code and message, as a
	// JSON-RPC error, not in interlock's envelope). When false, the
	// default, the client gets UPSTREAM_ERROR naming the code, and the
	// message stays in the gateway's log: it may hold the server's
	// internals or secrets.
	PassErrors bool `yaml:"pass_errors"`

	Line  int `yaml:"-"`
	lines lines
	// client is set for a server of a client's mcpServers or servers,
	// whose command, args, url and cwd expand variables as the client's do.
	client bool
}

// Breaker configures an upstream's circuit breaker.
type Breaker struct {
	Failures int    `yaml:"failures"`
	Delay    string `yaml:"delay"`
	// Every is Delay, parsed.
	Every time.Duration `yaml:"-"`
}

// checkResilience checks an upstream's resilience settings.
func checkResilience(u *Upstream, add func(int, string, ...any)) {
	if u.Retries != nil && (*u.Retries < 0 || *u.Retries > 10) {
		add(u.Line, "upstream %q: retries must be between 0 and 10", u.Name)
	}
	if u.MaxInFlight < 0 || u.MaxInFlight > 100000 {
		add(u.Line, "upstream %q: max_in_flight must be between 1 and 100000", u.Name)
	}
	if u.Rate < 0 {
		add(u.Line, "upstream %q: rate must be a positive number of calls per second", u.Name)
	}
	if b := u.Breaker; b != nil {
		if b.Failures < 0 || b.Failures > 10000 {
			add(u.Line, "upstream %q: breaker.failures must be between 1 and 10000", u.Name)
		}
		if b.Delay != "" {
			d, err := time.ParseDuration(b.Delay)
			if err != nil || d < time.Second || d > 24*time.Hour {
				add(u.Line, "upstream %q: breaker.delay %q must be a duration between 1s and 24h, such as 60s", u.Name, b.Delay)
			}
			b.Every = d
		}
	}
}

// TrustsHints reports whether the gateway takes the upstream's tool
// annotations into account.
func (u *Upstream) TrustsHints() bool { return u.TrustHints == nil || *u.TrustHints }

// DefaultCallTimeout bounds an attempt of a call to an upstream that sets
// no timeout.
const DefaultCallTimeout = 30 * time.Second

// UnmarshalYAML records where the upstream and each of its keys start, for
// messages, and rejects unknown fields.
func (u *Upstream) UnmarshalYAML(n *yaml.Node) error {
	type plain Upstream
	u.Line, u.lines = n.Line, keyLines(n)
	return n.Load((*plain)(u), yaml.WithKnownFields())
}

// At returns the line of the upstream's key at path (such as "command" or
// "env.TOKEN"), or of the upstream itself when the key is not written.
func (u *Upstream) At(path string) int { return u.lines.At(path, u.Line) }

// checkUpstreams checks the upstreams, those of an MCP client's
// mcpServers or servers map included (which it adds to f.Upstreams),
// parses their durations and expands ${VAR} in their env and headers. It
// returns each upstream's name with its line.
func checkUpstreams(f *File, expand expander, add func(int, string, ...any)) map[string]int {
	f.Upstreams = append(f.Upstreams, clientUpstreams("mcpServers", f.MCPServers, add)...)
	f.Upstreams = append(f.Upstreams, clientUpstreams("servers", f.Servers, add)...)
	names := map[string]int{}
	for _, u := range f.Upstreams {
		if u.client {
			expandClientFields(u, expand)
		}
		switch {
		case u.Name == "":
			add(u.Line, "upstream has no name: add name: <short name>")
		case names[u.Name] != 0:
			add(u.At("name"), "upstream %q is already defined on line %d", u.Name, names[u.Name])
		default:
			names[u.Name] = u.Line
		}
		switch {
		case u.URL != "" && len(u.Command) > 0:
			add(u.At("url"), "upstream %q has both command and url: use command for a child over stdio, url for an HTTP server", u.Name)
		case u.URL != "":
			if parsed, err := url.Parse(u.URL); err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
				add(u.At("url"), "upstream %q: url %q must be an http:// or https:// URL, such as https://mcp.example.com/mcp", u.Name, u.URL)
			}
			if len(u.Env) > 0 || u.Dir != "" || u.InheritEnv {
				key := "env"
				switch {
				case len(u.Env) > 0:
				case u.Dir != "":
					key = "dir"
				default:
					key = "inherit_env"
				}
				add(u.At(key), "upstream %q: env, inherit_env and dir apply only to a command; use headers for an HTTP upstream", u.Name)
			}
		case len(u.Command) == 0 || u.Command[0] == "":
			add(u.Line, "upstream %q has no command or url: add command: [program, arg…] or url: https://…", u.Name)
		case len(u.Headers) > 0:
			add(u.At("headers"), "upstream %q: headers apply only to a url", u.Name)
		}
		u.CallTimeout = DefaultCallTimeout
		if u.Timeout != "" {
			d, err := time.ParseDuration(u.Timeout)
			if err != nil || d < 100*time.Millisecond || d > 24*time.Hour {
				add(u.At("timeout"), "upstream %q: timeout %q must be a duration between 100ms and 24h, such as 30s", u.Name, u.Timeout)
			}
			u.CallTimeout = d
		}
		checkResilience(u, add)
		if !prefixRE.MatchString(u.Prefix) {
			add(u.At("prefix"), "upstream %q: prefix %q may only use letters, digits, '_', '-' and '.'", u.Name, u.Prefix)
		}
		for _, kv := range []struct {
			field  string
			values map[string]string
		}{{"env", u.Env}, {"headers", u.Headers}} {
			field, values := kv.field, kv.values
			for _, k := range slices.Sorted(maps.Keys(values)) {
				values[k] = expand(u.At(field+"."+k), fmt.Sprintf("upstream %q: %s %s", u.Name, field, k), values[k])
			}
		}
		for _, k := range slices.Sorted(maps.Keys(u.Env)) {
			if isSecretVar(k) {
				add(u.At("env."+k), "upstream %q: env may not set %s: a server behind the gate must never hold the sealing keys", u.Name, k)
			}
		}
	}
	return names
}

// checkUpstreamNames reports each upstream the policy names that the file
// does not configure: a rule's match.upstream (when the file has
// upstreams at all, so that a policy may be checked alone) and a tenant's
// upstreams. upstreams maps each configured name to its line.
func checkUpstreamNames(f *File, upstreams map[string]int, add func(int, string, ...any)) {
	checkRule := func(r *policy.Rule) {
		if up := r.Match.Upstream; up != "" && len(f.Upstreams) > 0 && upstreams[up] == 0 {
			add(r.At("match.upstream"), "rule %q: match.upstream %q is not an upstream of this file: use one of %s", r.Name, up, strings.Join(upstreamNames(f), ", "))
		}
	}
	for _, r := range f.Policy.Rules {
		checkRule(r)
	}
	for _, t := range f.Policy.Tenants {
		for i, up := range t.Upstreams {
			if upstreams[up] == 0 {
				add(t.At(fmt.Sprintf("upstreams[%d]", i)), "tenant %q: upstream %q is not an upstream of this file: use one of %s", t.Name, up, strings.Join(upstreamNames(f), ", "))
			}
		}
		for _, r := range t.Rules {
			if r != nil {
				checkRule(r)
			}
		}
	}
}

// UpstreamNames lists the names of f's upstreams, for messages.
func (f *File) UpstreamNames() []string { return upstreamNames(f) }

// upstreamNames lists the names of f's upstreams, for messages.
func upstreamNames(f *File) []string {
	out := make([]string, 0, len(f.Upstreams))
	for _, u := range f.Upstreams {
		if u.Name != "" {
			out = append(out, u.Name)
		}
	}
	return out
}

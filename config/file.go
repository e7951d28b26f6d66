// Package config reads interlock's configuration file, in Caddy's order:
// parse (the YAML into types, unknown fields refused at their line),
// validate (every problem found, each at its file:line) and provision
// (durations parsed, ${VAR} expanded, defaults filled in, rules
// compiled). It owns what the gateway runs with: the upstream servers it
// fronts, the API keys and OAuth issuer it accepts, the stores, the HTTP
// limits, the audit log and its checkpoints, the webhooks it notifies, and
// an MCP client's own mcpServers or servers map. The rules that decide
// each call are package policy's; config reads them from the same document
// and checks what they name outside the policy, such as an upstream.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/policy"
)

// File is a loaded configuration file: the policy that decides calls, and
// what the gateway runs with.
type File struct {
	// Policy is read inline: its keys (rules, tenants, budgets,
	// default_mode…) sit at the top of the file beside config's own, and
	// its methods (Decide, Hints, ToolModes…) are the file's. Its Path is
	// where the file came from, for messages.
	policy.Policy `yaml:",inline"`
	// Digest is the hex SHA-256 of the bytes the file was parsed from,
	// which names this version of it (in the audit log of a reload, say).
	Digest string `yaml:"-"`
	// Warnings are what is likely wrong with the file but does not stop
	// it: check prints them, and a gateway logs them and shows them on
	// its banner and /readyz.
	Warnings  LoadErrors  `yaml:"-"`
	Upstreams []*Upstream `yaml:"upstreams"`
	// MCPServers and Servers are an MCP client's own list of servers, as
	// Claude Desktop, Claude Code and Cursor ("mcpServers") and VS Code
	// ("servers") write it: each server is an upstream of its name, so a
	// client's configuration file is an interlock configuration as it is.
	MCPServers map[string]*ClientServer `yaml:"mcpServers"`
	Servers    map[string]*ClientServer `yaml:"servers"`
	// Inputs is VS Code's list of values it prompts for; interlock prompts
	// for nothing, so it is read past.
	Inputs yaml.Node `yaml:"inputs"`
	Auth   Auth      `yaml:"auth"`
	Store  Store     `yaml:"store"`
	HTTP   HTTP      `yaml:"http"`
	Audit  Audit     `yaml:"audit"`
	// Notify lists webhooks told of every new pending approval.
	Notify []*Webhook `yaml:"notify"`
	// Shadow names a candidate policy file (rules and default_mode only),
	// relative to this one, that decides every call beside the rules
	// without enforcing anything; ShadowPolicy is that file, loaded.
	Shadow       string `yaml:"shadow"`
	ShadowPolicy *File  `yaml:"-"`
}

// LoadError is one problem in a configuration file, at its file and line.
type LoadError = policy.LoadError

// LoadErrors are all the problems found in one file, in file order.
type LoadErrors = policy.LoadErrors

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

// Store says where live confirm tokens are kept: in the gateway's memory
// when Redis is empty, or in Redis, shared by every gateway that uses the
// same server, prefix and INTERLOCK_SECRET.
type Store struct {
	// Redis is a redis:// or rediss:// URL; ${VAR} in it is read from the
	// gateway's environment at load, so a password need not be in the file.
	Redis string `yaml:"redis"`
	// Prefix starts every key interlock writes; "interlock:" when absent.
	Prefix string `yaml:"prefix"`
	// Postgres, a postgres:// URL, keeps approvals and standing grants in
	// PostgreSQL instead (tokens stay in Redis or memory); ${VAR} expands.
	Postgres string `yaml:"postgres"`
}

// HTTP bounds what clients of the gateway's HTTP face may hold: sessions,
// connections and the time a request may take. Every field has a default.
type HTTP struct {
	// SessionIdleTimeout closes an MCP session that has had no request for
	// this long.
	SessionIdleTimeout time.Duration `yaml:"-"`
	// MaxSessionsPerPrincipal bounds the open MCP sessions of one tenant
	// and principal; a client over the cap gets 429 until one closes.
	MaxSessionsPerPrincipal int `yaml:"max_sessions_per_principal"`
	// MaxConnections bounds the connections served at once; more wait in
	// the listen queue.
	MaxConnections int `yaml:"max_connections"`
	// ReadHeaderTimeout bounds reading a request's headers, ReadTimeout the
	// whole request with its body.
	ReadHeaderTimeout time.Duration `yaml:"-"`
	ReadTimeout       time.Duration `yaml:"-"`
	// WriteTimeout bounds a response that is not an MCP event stream, from
	// the end of its request's headers.
	WriteTimeout time.Duration `yaml:"-"`
	// IdleTimeout closes a kept-alive connection with no request.
	IdleTimeout time.Duration `yaml:"-"`

	// durations are the duration fields as written, by key.
	durations map[string]string
	// lines maps each key to its line, for messages.
	lines map[string]int
	line  int
}

// Defaults of the http section.
const (
	DefaultSessionIdleTimeout      = 30 * time.Minute
	DefaultMaxSessionsPerPrincipal = 32
	DefaultMaxConnections          = 1024
	DefaultReadHeaderTimeout       = 10 * time.Second
	DefaultReadTimeout             = 30 * time.Second
	DefaultWriteTimeout            = 10 * time.Minute
	DefaultIdleTimeout             = 2 * time.Minute
)

// httpFields is the http section as written.
type httpFields struct {
	SessionIdleTimeout      string `yaml:"session_idle_timeout"`
	MaxSessionsPerPrincipal int    `yaml:"max_sessions_per_principal"`
	MaxConnections          int    `yaml:"max_connections"`
	ReadHeaderTimeout       string `yaml:"read_header_timeout"`
	ReadTimeout             string `yaml:"read_timeout"`
	WriteTimeout            string `yaml:"write_timeout"`
	IdleTimeout             string `yaml:"idle_timeout"`
}

// UnmarshalYAML reads the http section, rejecting unknown fields and
// recording each key's line.
func (h *HTTP) UnmarshalYAML(n *yaml.Node) error {
	var plain httpFields
	if err := n.Load(&plain, yaml.WithKnownFields()); err != nil {
		return err
	}
	h.line, h.lines = n.Line, map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		h.lines[n.Content[i].Value] = n.Content[i].Line
	}
	h.MaxSessionsPerPrincipal, h.MaxConnections = plain.MaxSessionsPerPrincipal, plain.MaxConnections
	h.durations = map[string]string{
		"session_idle_timeout": plain.SessionIdleTimeout,
		"read_header_timeout":  plain.ReadHeaderTimeout,
		"read_timeout":         plain.ReadTimeout,
		"write_timeout":        plain.WriteTimeout,
		"idle_timeout":         plain.IdleTimeout,
	}
	return nil
}

// check applies the defaults and reports values out of range.
func (h *HTTP) check(add func(line int, format string, args ...any)) {
	at := func(key string) int {
		if l := h.lines[key]; l > 0 {
			return l
		}
		return h.line
	}
	for _, d := range []struct {
		key      string
		dst      *time.Duration
		def, min time.Duration
		max      time.Duration
	}{
		{"session_idle_timeout", &h.SessionIdleTimeout, DefaultSessionIdleTimeout, time.Minute, 24 * time.Hour},
		{"read_header_timeout", &h.ReadHeaderTimeout, DefaultReadHeaderTimeout, 100 * time.Millisecond, 10 * time.Minute},
		{"read_timeout", &h.ReadTimeout, DefaultReadTimeout, 100 * time.Millisecond, time.Hour},
		{"write_timeout", &h.WriteTimeout, DefaultWriteTimeout, 100 * time.Millisecond, 24 * time.Hour},
		{"idle_timeout", &h.IdleTimeout, DefaultIdleTimeout, 100 * time.Millisecond, 24 * time.Hour},
	} {
		raw := h.durations[d.key]
		if raw == "" {
			*d.dst = d.def
			continue
		}
		v, err := time.ParseDuration(raw)
		if err != nil || v < d.min || v > d.max {
			add(at(d.key), "http.%s %q must be a duration between %s and %s, such as %s", d.key, raw, d.min, d.max, d.def)
		}
		*d.dst = v
	}
	for _, n := range []struct {
		key      string
		dst      *int
		def, max int
	}{
		{"max_sessions_per_principal", &h.MaxSessionsPerPrincipal, DefaultMaxSessionsPerPrincipal, 100_000},
		{"max_connections", &h.MaxConnections, DefaultMaxConnections, 1_000_000},
	} {
		if _, given := h.lines[n.key]; !given {
			*n.dst = n.def
		} else if *n.dst < 1 || *n.dst > n.max {
			add(at(n.key), "http.%s must be between 1 and %d (default %d)", n.key, n.max, n.def)
		}
	}
}

// Audit says where the audit log is kept: in SQLite (audit.db in the
// gateway's data directory unless SQLite names a file), or in PostgreSQL
// when Postgres is set.
type Audit struct {
	// Required makes a confirmed call fail closed when its record cannot be
	// written; true when absent.
	Required *bool `yaml:"required"`
	// AllowedCalls says when the answer to an allowed call (one no key had
	// to confirm) goes out: once its record is committed
	// (AllowedCallsCommitted, the default), or once it is queued for the
	// next commit (AllowedCallsQueued), which takes the append off the
	// call's path and lets a crash of the process lose the records still
	// queued.
	AllowedCalls string `yaml:"allowed_calls"`
	// SQLite is the database file; a relative path is taken from the
	// gateway's data directory.
	SQLite string `yaml:"sqlite"`
	// Postgres is a postgres:// URL; ${VAR} is read from the gateway's
	// environment at load.
	Postgres string `yaml:"postgres"`
	// Checkpoint signs the chain's head now and then, so that a rewrite of
	// the whole log is still found.
	Checkpoint *Checkpoint `yaml:"checkpoint"`
}

// Webhook is a place told of every new pending approval.
type Webhook struct {
	// URL receives a POST; ${VAR} is read from the gateway's environment
	// at load (Slack and Mattermost put their token in the URL).
	URL string `yaml:"url"`
	// Format is json (the default), slack or mattermost.
	Format string `yaml:"format"`
}

// IsRequired reports whether confirmed calls fail closed without a record.
func (a Audit) IsRequired() bool { return a.Required == nil || *a.Required }

// The values of audit.allowed_calls.
const (
	AllowedCallsCommitted = "committed"
	AllowedCallsQueued    = "queued"
)

// QueuesAllowed reports whether the answer to an allowed call goes out once
// its record is queued, not committed.
func (a Audit) QueuesAllowed() bool { return a.AllowedCalls == AllowedCallsQueued }

// Checkpoint configures signed checkpoints of the audit chain's head.
type Checkpoint struct {
	// KeyFile holds the Ed25519 private key, PEM-encoded PKCS #8 (as
	// `openssl genpkey -algorithm ed25519` writes it).
	KeyFile string `yaml:"key_file"`
	// Interval is how often the head is signed when it moved; 1m when
	// absent.
	Interval string `yaml:"interval"`
	// File, when set, also receives every checkpoint as a JSON line: a
	// copy outside the database, for another team to keep.
	File string `yaml:"file"`
	// Postgres and Table, when set, also append every checkpoint to that
	// table (columns seq, hash, time, key_id, signature), which may be
	// another team's; Table is interlock_checkpoints when absent. ${VAR}
	// expands in the URL.
	Postgres string `yaml:"postgres"`
	Table    string `yaml:"table"`

	Every time.Duration `yaml:"-"`
	Line  int           `yaml:"-"`
}

// DefaultCheckpointInterval is how often the audit chain's head is signed
// unless the config says otherwise.
const DefaultCheckpointInterval = time.Minute

// UnmarshalYAML records where the checkpoint section starts and rejects
// unknown fields.
func (c *Checkpoint) UnmarshalYAML(n *yaml.Node) error {
	type plain Checkpoint
	c.Line = n.Line
	return n.Load((*plain)(c), yaml.WithKnownFields())
}

// Auth configures HTTP authentication.
type Auth struct {
	Keys []*Key `yaml:"keys"`
	// OAuth, when set, also accepts the access tokens of an OAuth 2.1
	// authorization server, and may sign approvers in to the console with
	// it.
	OAuth *OAuth `yaml:"oauth"`
}

// Configured reports whether HTTP callers must authenticate: some API key
// or an OAuth issuer is configured.
func (a Auth) Configured() bool { return len(a.Keys) > 0 || a.OAuth != nil }

// OAuth configures the gateway as an OAuth resource server.
type OAuth struct {
	// Issuer is the authorization server's issuer identifier: https, or
	// http on a loopback address.
	Issuer string `yaml:"issuer"`
	// Audience is the resource URL an access token must name in aud; the
	// gateway's public URL followed by /mcp when empty.
	Audience string `yaml:"audience"`
	// JWKSURL is where the issuer's keys are; discovered from the issuer's
	// /.well-known/openid-configuration when empty.
	JWKSURL string      `yaml:"jwks_url"`
	Claims  OAuthClaims `yaml:"claims"`
	// Scopes must all be granted to a token; none when empty.
	Scopes []string `yaml:"scopes"`
	// TokenProfile is what an access token must look like: rfc9068 (when
	// absent: typ at+jwt, with client_id, iat and jti) or jwt (the plain
	// JWT access tokens many identity providers issue by default).
	TokenProfile string `yaml:"token_profile"`
	// Console, when set, lets approvers sign in to the console with the
	// same issuer.
	Console *OAuthConsole `yaml:"console"`
	// Introspection, when set, asks the issuer whether each token is still
	// active (RFC 7662), so that a revoked token stops working within the
	// cache time rather than at its expiry.
	Introspection *OAuthIntrospection `yaml:"introspection"`
}

// DefaultIntrospectionCache is how long an introspection answer is kept
// unless the config says otherwise.
const DefaultIntrospectionCache = 30 * time.Second

// OAuthIntrospection is the gateway's client at the issuer's token
// introspection endpoint.
type OAuthIntrospection struct {
	// URL is the endpoint: https, or http on a loopback address; the
	// introspection_endpoint of the issuer's discovery document when
	// empty.
	URL string `yaml:"url"`
	// ClientID and ClientSecret authenticate the gateway to the endpoint
	// (client_secret_basic); ${VAR} in the secret is read from the
	// gateway's environment at load.
	ClientID     string `yaml:"client_id"`
	ClientSecret string `yaml:"client_secret"`
	// Cache is how long an answer is kept for its token, 1s to 1h; 30s
	// when absent.
	Cache string `yaml:"cache"`

	CacheFor time.Duration `yaml:"-"`
}

// OAuthClaims name the claims that identify a caller.
type OAuthClaims struct {
	// Principal is "sub" when empty.
	Principal string `yaml:"principal"`
	// Tenant, when empty, puts every caller in tenant "default".
	Tenant string `yaml:"tenant"`
	// Groups is "groups" when empty.
	Groups string `yaml:"groups"`
}

// OAuthConsole is the console's client registration at the issuer.
type OAuthConsole struct {
	ClientID string `yaml:"client_id"`
	// ClientSecret is empty for a public client; ${VAR} is read from the
	// gateway's environment at load.
	ClientSecret string `yaml:"client_secret"`
	// Scopes are asked for beside openid, profile and email, such as
	// groups for a provider that puts the groups claim in ID tokens only
	// when asked.
	Scopes []string `yaml:"scopes"`
}

// Key is a static API key, sent as "Authorization: Bearer <key>". Only its
// SHA-256 is stored.
type Key struct {
	SHA256    string `yaml:"sha256"`
	Principal string `yaml:"principal"`
	Tenant    string `yaml:"tenant"`
	// Groups name the groups the key's principal belongs to, for rules
	// whose approvers name a group (group:NAME).
	Groups []string `yaml:"groups"`

	Line  int `yaml:"-"`
	lines lines
}

// DefaultTenant is the tenant of an API key that names none.
const DefaultTenant = "default"

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

// UnmarshalYAML records where the key and each of its fields start, for
// messages, and rejects unknown fields.
func (k *Key) UnmarshalYAML(n *yaml.Node) error {
	type plain Key
	k.Line, k.lines = n.Line, keyLines(n)
	return n.Load((*plain)(k), yaml.WithKnownFields())
}

// Load reads and checks the configuration file at name.
func Load(name string) (*File, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading configuration: %w", err)
	}
	return Parse(name, data, os.LookupEnv)
}

var (
	prefixRE = regexp.MustCompile(`^[A-Za-z0-9_.-]*$`)
	sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ownKeys are the top-level keys of interlock's configuration, read from
// the yaml tags of File and the policy it holds inline.
var ownKeys = func() []string {
	var keys []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			switch {
			case opts == "inline":
				walk(f.Type)
			case name != "" && name != "-":
				keys = append(keys, name)
			}
		}
	}
	walk(reflect.TypeFor[File]())
	return keys
}()

// load decodes data into f, refusing unknown fields. A JSON object that
// holds mcpServers, servers or projects (Claude Code's user file, whose
// servers of the working directory are read, see projectServers) is a
// client's own file: the top-level keys
// that are not interlock's are the client's own settings (Claude
// Desktop's, say) and are read past, so the file is a configuration as it
// is. interlock's own keys are read as always, so none is ever dropped.
func load(name string, data []byte, f *File) error {
	if trimmed := bytes.TrimSpace(data); len(trimmed) == 0 || trimmed[0] != '{' {
		return yaml.Load(data, f, yaml.WithKnownFields())
	}
	var doc yaml.Node
	if err := yaml.Load(data, &doc); err != nil {
		return err
	}
	top := &doc
	if top.Kind == yaml.DocumentNode && len(top.Content) == 1 {
		top = top.Content[0]
	}
	if top.Kind == yaml.MappingNode && slices.ContainsFunc(top.Content, func(n *yaml.Node) bool {
		return n.Value == "mcpServers" || n.Value == "servers" || n.Value == "projects"
	}) {
		// Claude Code's user file keeps servers per project: those of the
		// directory the gateway runs in are the file's mcpServers.
		dir, _ := os.Getwd()
		path, servers, err := projectServers(top, dir)
		if err != nil {
			return LoadErrors{{File: name, Line: valueOf(top, "projects").Line, Msg: err.Error()}}
		}
		var kept []*yaml.Node
		for i := 0; i+1 < len(top.Content); i += 2 {
			if slices.Contains(ownKeys, top.Content[i].Value) {
				kept = append(kept, top.Content[i], top.Content[i+1])
			}
		}
		top.Content = kept
		if len(path) > 1 {
			if v := valueOf(top, "mcpServers"); v != nil {
				*v = *servers
			} else {
				top.Content = append(top.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "mcpServers", Line: servers.Line}, servers)
			}
		}
	}
	return doc.Load(f, yaml.WithKnownFields())
}

// Parse reads and checks a configuration file's contents; name is used in
// messages and lookupEnv expands ${VAR} in upstream environments and
// headers, and in store and audit URLs.
func Parse(name string, data []byte, lookupEnv func(string) (string, bool)) (*File, error) {
	// A file that sets nothing is a mistake, such as one an editor has
	// truncated before writing it, and never a configuration: in force it
	// would drop every rule.
	if what := nothingSet(data); what != "" {
		return nil, LoadErrors{{File: name, Line: 1, Msg: what + ": a configuration needs at least the upstreams interlock fronts (upstreams:, or an MCP client's mcpServers:) or the rules it applies (rules:)"}}
	}
	sum := sha256.Sum256(data)
	f := &File{Policy: policy.Policy{Path: name}, Digest: hex.EncodeToString(sum[:])}
	// An MCP client's JSON is read as the client reads it, comments and
	// trailing commas allowed, then as the YAML it is a subset of.
	data, err := jsonDocument(name, data)
	if err != nil {
		return nil, err
	}
	if err := load(name, data, f); err != nil {
		if les, ok := err.(LoadErrors); ok {
			return nil, les
		}
		return nil, policy.YAMLErrors(name, data, err)
	}
	var errs LoadErrors
	add := func(line int, format string, args ...any) {
		errs = append(errs, LoadError{File: name, Line: line, Msg: fmt.Sprintf(format, args...)})
	}
	keyLine := topLevelLines(data)
	// Parsed. An empty list item ("-" alone) decodes to nothing; it is an
	// error the file can be told about, not a hole the rest would trip
	// over, so it stops here.
	var empty LoadErrors
	for _, section := range []struct {
		key   string
		empty bool
	}{{"upstreams", slices.Contains(f.Upstreams, nil)}, {"auth", slices.Contains(f.Auth.Keys, nil)}} {
		if section.empty {
			empty = append(empty, LoadError{File: name, Line: keyLine[section.key], Msg: fmt.Sprintf("%s has an empty entry (a lone \"-\"): remove it or fill it in", section.key)})
		}
	}
	if empty = append(empty, f.Policy.EmptyEntries(keyLine)...); len(empty) > 0 {
		return nil, empty
	}
	// expand replaces ${VAR} in a value read from the file; what names the
	// value in messages.
	var expand expander = func(line int, what, value string) string {
		expanded, missing, secret := expandEnv(value, lookupEnv)
		switch {
		case secret != "":
			add(line, "%s refers to ${%s}: the sealing keys stay inside the gateway; use another variable", what, secret)
		case missing.ref != "":
			add(line, "%s", missing.message(what))
		}
		return expanded
	}
	// Validate and provision, section by section: each value is checked
	// where it is derived (a duration parsed, a ${VAR} expanded, a default
	// filled in), and every problem is kept, so that one run of
	// interlock check names them all.
	names := checkUpstreams(f, expand, add)
	checkStore(f, keyLine, expand, add)
	f.HTTP.check(add)
	checkAudit(f, keyLine, expand, add)
	checkNotify(f, keyLine, expand, add)
	checkKeys(f, add)
	checkOAuth(f, keyLine, expand, add)
	// The policy part validates and provisions itself; what it names
	// outside itself is checked here.
	errs = append(errs, f.Policy.Provision(keyLine)...)
	checkUpstreamNames(f, names, add)
	f.Warnings = checkApprovers(f, add)
	f.Warnings = append(f.Warnings, checkArguments(f)...)
	// In file order: a rule's problems are found key by key, not line by
	// line. The shadow file's come after this file's, in their own order.
	slices.SortStableFunc(errs, func(a, b LoadError) int { return a.Line - b.Line })
	errs = append(errs, loadShadow(f, keyLine, lookupEnv)...)
	if len(errs) > 0 {
		return nil, errs
	}
	return f, nil
}

// nothingSet says how data sets nothing at all (it is empty, holds only
// comments, or is an empty mapping or null), or "" when it sets something.
func nothingSet(data []byte) string {
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	if len(bytes.TrimSpace(data)) == 0 {
		return "the file is empty"
	}
	comments := true
	for line := range bytes.Lines(data) {
		if l := bytes.TrimSpace(line); len(l) > 0 && l[0] != '#' {
			comments = false
			break
		}
	}
	if comments {
		return "the file holds only comments"
	}
	var doc yaml.Node
	if yaml.Load(data, &doc) != nil || len(doc.Content) != 1 {
		// What does not parse is told about where it is parsed.
		return ""
	}
	if top := doc.Content[0]; top.Kind == yaml.MappingNode && len(top.Content) == 0 || top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return "the file sets nothing"
	}
	return ""
}

// expander replaces ${VAR} in a value read from the file, reporting a
// variable that is not set or that names the sealing keys at line; what
// names the value in messages.
type expander func(line int, what, value string) string

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

// checkStore checks the store section and expands ${VAR} in its URLs.
func checkStore(f *File, keyLine lines, expand expander, add func(int, string, ...any)) {
	f.Store.Redis = expand(keyLine.At("store.redis", 0), "store.redis", f.Store.Redis)
	if f.Store.Postgres != "" {
		at := keyLine.At("store.postgres", 0)
		f.Store.Postgres = expand(at, "store.postgres", f.Store.Postgres)
		if !strings.HasPrefix(f.Store.Postgres, "postgres://") && !strings.HasPrefix(f.Store.Postgres, "postgresql://") {
			add(at, "store.postgres must be a postgres:// URL")
		}
	}

	if f.Store.Redis != "" && !strings.HasPrefix(f.Store.Redis, "redis://") && !strings.HasPrefix(f.Store.Redis, "rediss://") {
		add(keyLine.At("store.redis", 0), "store.redis must be a redis:// or rediss:// URL, such as redis://127.0.0.1:6379/0")
	}
	if f.Store.Prefix == "" {
		f.Store.Prefix = "interlock:"
	}
}

// checkNotify checks the webhooks and expands ${VAR} in their URLs.
func checkNotify(f *File, keyLine lines, expand expander, add func(int, string, ...any)) {
	for i, h := range f.Notify {
		at := keyLine.At(fmt.Sprintf("notify[%d].url", i), keyLine.At("notify", 0))
		if h == nil {
			add(keyLine.At("notify", 0), "notify has an empty entry: give url and format")
			continue
		}
		h.URL = expand(at, "notify url", h.URL)
		if u, err := url.Parse(h.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add(at, "notify url must be an http:// or https:// URL")
		}
		switch h.Format {
		case "", "json", "slack", "mattermost":
		default:
			add(at, "notify format %q: use json, slack or mattermost", h.Format)
		}
	}
}

// checkKeys checks the API keys: each a distinct SHA-256 with a principal,
// in the default tenant when it names none.
func checkKeys(f *File, add func(int, string, ...any)) {
	hashes := map[string]int{}
	for _, k := range f.Auth.Keys {
		k.SHA256 = strings.ToLower(strings.TrimSpace(k.SHA256))
		if !sha256RE.MatchString(k.SHA256) {
			add(k.lines.At("sha256", k.Line), "auth key: sha256 must be 64 hex digits (the SHA-256 of the key; `interlock key` makes one)")
		} else if hashes[k.SHA256] != 0 {
			add(k.lines.At("sha256", k.Line), "auth key: the same key is already listed on line %d", hashes[k.SHA256])
		} else {
			hashes[k.SHA256] = k.Line
		}
		if k.Principal == "" {
			add(k.Line, "auth key: principal is required: name who uses this key")
		}
		if k.Tenant == "" {
			k.Tenant = DefaultTenant
		}
	}
}

// shadowKeys are the only top-level keys a shadow policy may have: what
// decides, not what runs.
var shadowKeys = []string{"rules", "default_mode"}

// loadShadow loads the shadow policy f names, if any. Its problems carry
// its own name and lines; a key of the live config in it is one.
func loadShadow(f *File, keyLine lines, lookupEnv func(string) (string, bool)) LoadErrors {
	if f.Shadow == "" {
		return nil
	}
	name := f.Shadow
	if !filepath.IsAbs(name) {
		name = filepath.Join(filepath.Dir(f.Path), name)
	}
	// A device or a pipe would be read for ever.
	if fi, err := os.Stat(name); err == nil && !fi.Mode().IsRegular() {
		return LoadErrors{{File: f.Path, Line: keyLine.At("shadow", 0), Msg: fmt.Sprintf("shadow policy: %s is not a regular file", name)}}
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return LoadErrors{{File: f.Path, Line: keyLine.At("shadow", 0), Msg: fmt.Sprintf("shadow policy: %v", err)}}
	}
	if what := nothingSet(data); what != "" {
		return LoadErrors{{File: name, Line: 1, Msg: "shadow policy: " + what + ": a shadow policy holds the rules it tries beside the live ones (rules:)"}}
	}
	if line, ok := topLevelLines(data)["shadow"]; ok {
		// Checked before parsing it, which would follow it.
		return LoadErrors{{File: name, Line: line, Msg: "shadow: a shadow policy cannot name a shadow policy of its own"}}
	}
	shadow, err := Parse(name, data, lookupEnv)
	if err != nil {
		if les, ok := err.(LoadErrors); ok {
			return les
		}
		return LoadErrors{{File: name, Msg: err.Error()}}
	}
	var errs LoadErrors
	for key, line := range topLevelLines(data) {
		if !strings.ContainsAny(key, ".[") && !slices.Contains(shadowKeys, key) {
			errs = append(errs, LoadError{File: name, Line: line, Msg: fmt.Sprintf(
				"%s: a shadow policy holds only rules and default_mode; %s belongs in the live config %s", key, key, f.Path)})
		}
	}
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b LoadError) int { return a.Line - b.Line })
		return errs
	}
	// Which tools a tenant may use is the live config's to say: a shadow
	// decides with the same allowlists and overlays, so that it differs
	// only where its own rules do.
	shadow.Tenants = f.Tenants
	f.ShadowPolicy = shadow
	return nil
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
	for _, r := range f.Rules {
		checkRule(r)
	}
	for _, t := range f.Tenants {
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

// checkAudit checks the audit section and expands ${VAR} in its URL.
func checkAudit(f *File, keyLine lines, expand expander, add func(int, string, ...any)) {
	a := &f.Audit
	line := keyLine.At("audit.postgres", 0)
	if a.Postgres != "" {
		a.Postgres = expand(line, "audit.postgres", a.Postgres)
		if !strings.HasPrefix(a.Postgres, "postgres://") && !strings.HasPrefix(a.Postgres, "postgresql://") {
			add(line, "audit.postgres must be a postgres:// URL, such as postgres://interlock@db.internal:5432/audit")
		}
		if a.SQLite != "" {
			add(keyLine.At("audit.sqlite", 0), "audit: give sqlite or postgres, not both")
		}
	}
	if v := a.AllowedCalls; v != "" && v != AllowedCallsCommitted && v != AllowedCallsQueued {
		add(keyLine.At("audit.allowed_calls", 0), "audit.allowed_calls %q must be %s (the default) or %s", v, AllowedCallsCommitted, AllowedCallsQueued)
	}
	cp := a.Checkpoint
	if cp == nil {
		return
	}
	if cp.KeyFile == "" {
		add(cp.Line, "audit.checkpoint needs key_file: an Ed25519 private key in PEM (openssl genpkey -algorithm ed25519 -out audit.key)")
	}
	cp.Every = DefaultCheckpointInterval
	if cp.Interval != "" {
		d, err := time.ParseDuration(cp.Interval)
		if err != nil || d < time.Second || d > 24*time.Hour {
			add(keyLine.At("audit.checkpoint.interval", cp.Line), "audit.checkpoint.interval %q must be a duration between 1s and 24h, such as 1m", cp.Interval)
		}
		cp.Every = d
	}
	if cp.Postgres != "" {
		at := keyLine.At("audit.checkpoint.postgres", cp.Line)
		cp.Postgres = expand(at, "audit.checkpoint.postgres", cp.Postgres)
		if !strings.HasPrefix(cp.Postgres, "postgres://") && !strings.HasPrefix(cp.Postgres, "postgresql://") {
			add(at, "audit.checkpoint.postgres must be a postgres:// URL")
		}
		if cp.Table == "" {
			cp.Table = "interlock_checkpoints"
		}
	}
	if cp.Table != "" && !tableNameRE.MatchString(cp.Table) {
		add(keyLine.At("audit.checkpoint.table", cp.Line), "audit.checkpoint.table %q must be a table name (letters, digits, _; optionally schema.table)", cp.Table)
	}
}

// checkOAuth checks the auth.oauth section and expands ${VAR} in the
// client secrets of the console and of introspection.
func checkOAuth(f *File, keyLine lines, expand expander, add func(int, string, ...any)) {
	o := f.Auth.OAuth
	if o == nil {
		return
	}
	at := func(key string) int { return keyLine.At("auth.oauth."+key, keyLine.At("auth.oauth", 0)) }
	switch {
	case o.Issuer == "":
		add(at("issuer"), "auth.oauth needs issuer: the authorization server's issuer URL, such as https://login.example.com/realms/acme")
	case !secureURL(o.Issuer):
		add(at("issuer"), "auth.oauth.issuer %q must be an https:// URL (http:// only on a loopback address such as 127.0.0.1)", o.Issuer)
	}
	if o.JWKSURL != "" && !secureURL(o.JWKSURL) {
		add(at("jwks_url"), "auth.oauth.jwks_url %q must be an https:// URL (http:// only on a loopback address); leave it out to discover it from the issuer", o.JWKSURL)
	}
	if o.Audience != "" {
		if u, err := url.Parse(o.Audience); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Fragment != "" {
			add(at("audience"), "auth.oauth.audience %q must be this gateway's resource URL, such as https://interlock.example.com/mcp", o.Audience)
		}
	}
	if o.TokenProfile != "" && o.TokenProfile != "rfc9068" && o.TokenProfile != "jwt" {
		add(at("token_profile"), "auth.oauth.token_profile %q: use rfc9068 (access tokens with typ at+jwt, the default) or jwt (plain JWT access tokens)", o.TokenProfile)
	}
	checkScopes("auth.oauth.scopes", o.Scopes, keyLine, at("scopes"), add)
	for key, name := range map[string]string{"principal": o.Claims.Principal, "tenant": o.Claims.Tenant, "groups": o.Claims.Groups} {
		if _, written := keyLine["auth.oauth.claims."+key]; written && strings.TrimSpace(name) == "" {
			add(at("claims."+key), "auth.oauth.claims.%s is empty: name a claim of the tokens, or leave the key out", key)
		}
	}
	if c := o.Console; c != nil {
		if c.ClientID == "" {
			add(at("console"), "auth.oauth.console needs client_id: the console's client id at the issuer")
		}
		c.ClientSecret = expand(at("console.client_secret"), "auth.oauth.console.client_secret", c.ClientSecret)
		checkScopes("auth.oauth.console.scopes", c.Scopes, keyLine, at("console.scopes"), add)
	}
	if in := o.Introspection; in != nil {
		if in.URL != "" && !secureURL(in.URL) {
			add(at("introspection.url"), "auth.oauth.introspection.url %q must be an https:// URL (http:// only on a loopback address); leave it out to discover it from the issuer", in.URL)
		}
		// client_secret_basic: the endpoint answers only a client it knows.
		if in.ClientID == "" {
			add(at("introspection"), "auth.oauth.introspection needs client_id: the gateway's client id at the issuer, allowed to introspect tokens")
		}
		if in.ClientSecret == "" {
			add(at("introspection"), "auth.oauth.introspection needs client_secret: the secret of client_id, such as ${INTROSPECTION_SECRET}")
		}
		in.ClientSecret = expand(at("introspection.client_secret"), "auth.oauth.introspection.client_secret", in.ClientSecret)
		in.CacheFor = DefaultIntrospectionCache
		if in.Cache != "" {
			d, err := time.ParseDuration(in.Cache)
			if err != nil || d < time.Second || d > time.Hour {
				add(at("introspection.cache"), "auth.oauth.introspection.cache %q must be a duration between 1s and 1h, such as 30s", in.Cache)
			}
			in.CacheFor = d
		}
	}
}

// checkScopes reports each entry of the list at key that is not an OAuth
// scope; line is the list's own line, for an entry without one.
func checkScopes(key string, scopes []string, keyLine lines, line int, add func(int, string, ...any)) {
	for i, s := range scopes {
		if s == "" || strings.ContainsAny(s, " \t\n\"\\") {
			add(keyLine.At(fmt.Sprintf("%s[%d]", key, i), line), "%s: %q is not a scope: no spaces, quotes or backslashes", key, s)
		}
	}
}

// secureURL reports whether raw is an https URL, or an http one on a
// loopback address, with no query or fragment.
func secureURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return false
	}
	switch u.Scheme {
	case "https":
		return true
	case "http":
		host := u.Hostname()
		ip := net.ParseIP(host)
		return host == "localhost" || (ip != nil && ip.IsLoopback())
	}
	return false
}

var tableNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// topLevelLines maps every key of a YAML document, by its path from the
// top ("store.redis", "audit.checkpoint.interval"), to its line.
func topLevelLines(data []byte) lines {
	var doc yaml.Node
	if yaml.Load(data, &doc) != nil {
		return lines{}
	}
	return keyLines(&doc)
}

// SecretFileEnv names the environment variable that may name a file
// holding the sealing keys, instead of INTERLOCK_SECRET holding them.
const SecretFileEnv = "INTERLOCK_SECRET_FILE"

// isSecretVar reports whether an environment variable carries the sealing
// keys or says where they are.
func isSecretVar(name string) bool {
	return name == interlock.SecretEnv || name == SecretFileEnv
}

// A loaded file decides calls through its policy, so that a library user
// can hand it to the gate as it is; the guard fails the build when it
// stops.
var _ interlock.Policy = (*File)(nil)

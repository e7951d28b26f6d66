package config

import (
	"time"

	"go.yaml.in/yaml/v4"
)

// The http section: the limits of the gateway's HTTP face.

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

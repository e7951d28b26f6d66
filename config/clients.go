package config

import (
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"
)

// ClientServer is one server of an MCP client's own configuration, as
// Claude Desktop, Claude Code and Cursor write it under "mcpServers" and
// VS Code under "servers": interlock takes that file as it is, and each
// server becomes an upstream of the same name.
type ClientServer struct {
	// Type is "stdio" (or absent) for a command, "http" or
	// "streamable-http" for a URL.
	Type    string            `yaml:"type"`
	Command string            `yaml:"command"`
	Args    []string          `yaml:"args"`
	Env     map[string]string `yaml:"env"`
	Cwd     string            `yaml:"cwd"`
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
	// Disabled servers are left out, as the client leaves them out.
	Disabled bool `yaml:"disabled"`

	Line  int `yaml:"-"`
	lines lines
}

// clientOnlyKeys are keys clients keep for themselves in a server's entry;
// they say nothing interlock acts on, so they are read past. Any other
// unknown key is an error, as everywhere in the file.
var clientOnlyKeys = []string{"autoApprove", "alwaysAllow", "description", "timeout", "transportType", "envFile", "dev", "gallery", "version"}

// UnmarshalYAML reads a server's entry, recording where each key starts.
func (s *ClientServer) UnmarshalYAML(n *yaml.Node) error {
	type plain ClientServer
	s.Line, s.lines = n.Line, keyLines(n)
	if n.Kind == yaml.MappingNode {
		kept := *n
		kept.Content = nil
		for i := 0; i+1 < len(n.Content); i += 2 {
			if !slices.Contains(clientOnlyKeys, n.Content[i].Value) {
				kept.Content = append(kept.Content, n.Content[i], n.Content[i+1])
			}
		}
		n = &kept
	}
	return n.Load((*plain)(s), yaml.WithKnownFields())
}

func (s *ClientServer) at(path string) int { return s.lines.At(path, s.Line) }

// clientUpstreams turns the servers of a client's configuration into
// upstreams, in name order, reporting what interlock cannot serve as the
// client would. key names the section ("mcpServers" or "servers").
func clientUpstreams(key string, servers map[string]*ClientServer, add func(int, string, ...any)) []*Upstream {
	var out []*Upstream
	for _, name := range slices.Sorted(maps.Keys(servers)) {
		s := servers[name]
		if s == nil {
			continue
		}
		if s.Disabled {
			continue
		}
		u := &Upstream{Name: name, Env: s.Env, Dir: s.Cwd, Headers: s.Headers, Line: s.Line, lines: s.lines, client: true}
		switch strings.ToLower(s.Type) {
		case "", "stdio":
			if s.URL != "" && s.Command == "" {
				u.URL = s.URL
				break
			}
			if s.Command == "" {
				add(s.Line, "%s.%s has no command or url: give \"command\" (and \"args\") for a server interlock starts, or \"url\" for one it reaches over HTTP", key, name)
				continue
			}
			u.Command = append([]string{s.Command}, s.Args...)
		case "http", "streamable-http", "streamablehttp":
			u.URL = s.URL
			if s.URL == "" {
				add(s.at("type"), "%s.%s is of type %q and has no url", key, name, s.Type)
				continue
			}
		case "sse":
			add(s.at("type"), "%s.%s speaks the SSE transport, which interlock does not: point it at the server's streamable HTTP endpoint (type \"http\"), or run it over stdio", key, name)
			continue
		default:
			add(s.at("type"), "%s.%s has type %q: use stdio (a command) or http (a url)", key, name, s.Type)
			continue
		}
		out = append(out, u)
	}
	return out
}

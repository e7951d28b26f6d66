package config

import (
	"fmt"
	"maps"
	"path/filepath"
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

// valueOf returns the value of key in a mapping node, or nil.
func valueOf(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// projectServers picks the servers of Claude Code's user file
// (~/.claude.json) that a gateway started in dir fronts: that project's
// own ("projects" > dir > "mcpServers", what `claude mcp add` writes by
// default) when it has some, else the user's, which Claude Code runs in
// every project (the top-level "mcpServers"). Only one of the two: the
// client routed through interlock must not also run the same servers
// beside it. It returns their path from the top and their node; a nil
// path for a file without projects, which is read as any client's. When
// neither dir nor the user has servers but other projects do, it says
// which.
func projectServers(top *yaml.Node, dir string) ([]string, *yaml.Node, error) {
	projects := valueOf(top, "projects")
	if projects == nil || projects.Kind != yaml.MappingNode {
		return nil, nil, nil
	}
	count := func(servers *yaml.Node) int {
		if servers == nil || servers.Kind != yaml.MappingNode {
			return 0
		}
		return len(servers.Content) / 2
	}
	if dir != "" {
		for i := 0; i+1 < len(projects.Content); i += 2 {
			if p := projects.Content[i].Value; filepath.Clean(p) == filepath.Clean(dir) {
				if servers := valueOf(projects.Content[i+1], "mcpServers"); count(servers) > 0 {
					return []string{"projects", p, "mcpServers"}, servers, nil
				}
			}
		}
	}
	user := valueOf(top, "mcpServers")
	if count(user) > 0 {
		return []string{"mcpServers"}, user, nil
	}
	var others []string
	for i := 0; i+1 < len(projects.Content); i += 2 {
		if n := count(valueOf(projects.Content[i+1], "mcpServers")); n > 0 {
			others = append(others, fmt.Sprintf("%s (%d)", projects.Content[i].Value, n))
		}
	}
	if len(others) > 0 {
		return nil, nil, fmt.Errorf("Claude Code keeps no servers in this file for %s, nor for every project (mcpServers), only for the projects %s: run interlock in one of those directories, or give interlock init --project DIR",
			dir, strings.Join(others, ", "))
	}
	return []string{"mcpServers"}, user, nil
}

// ServersPath says where in an MCP client's file (data, as [JSONC]
// returns it) are the servers a gateway started in dir fronts, as keys
// from the top: "mcpServers" or "servers", or for Claude Code's user file
// the project's or the user's (see projectServers). Nil means the
// file's "mcpServers" and "servers" both.
func ServersPath(name string, data []byte, dir string) ([]string, error) {
	var doc yaml.Node
	if err := yaml.Load(data, &doc); err != nil || len(doc.Content) != 1 {
		return nil, nil
	}
	path, _, err := projectServers(doc.Content[0], dir)
	if err != nil {
		return nil, LoadErrors{{File: name, Line: valueOf(doc.Content[0], "projects").Line, Msg: err.Error()}}
	}
	return path, nil
}

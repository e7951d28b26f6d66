// Package yamllines maps the keys of a YAML document to the lines they are
// written on, so that a configuration's messages point at the key that is
// wrong ("rule \"x\": ttl …" at the ttl: line) rather than at the start of
// its section. package config and package policy read one document
// between them and point into it the same way.
package yamllines

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v4"
)

// Lines maps the path of every key in a YAML node to its line. Paths join
// keys with dots and number list elements: "mode", "match.tools[1]",
// "choices.environment", "env.GITHUB_TOKEN".
type Lines map[string]int

// Of records the line of every key and list element under n.
func Of(n *yaml.Node) Lines {
	out := Lines{}
	out.walk(n, "")
	return out
}

func (l Lines) walk(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			l.walk(c, path)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			if path != "" {
				key = path + "." + key
			}
			l[key] = n.Content[i].Line
			l.walk(n.Content[i+1], key)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			key := fmt.Sprintf("%s[%d]", path, i)
			l[key] = c.Line
			l.walk(c, key)
		}
	}
}

// At returns the line of the key at path or, when the file does not spell
// that key out (a missing field, a default), of its nearest enclosing key;
// fallback when none is written.
func (l Lines) At(path string, fallback int) int {
	for path != "" {
		if line, ok := l[path]; ok {
			return line
		}
		if i := strings.LastIndexAny(path, ".["); i >= 0 {
			path = path[:i]
		} else {
			path = ""
		}
	}
	return fallback
}

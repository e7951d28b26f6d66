package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v4"
)

// lines maps the path of every key in a YAML node to its line, so that a
// message can point at the key that is wrong rather than at the start of
// its section. policy keeps the same walk for its rules; each package has
// its own so that neither exports a YAML helper the other would lean on. Paths join keys with dots and number list elements:
// "mode", "match.tools[1]", "choices.environment", "env.GITHUB_TOKEN".
type lines map[string]int

// keyLines records the line of every key and list element under n.
func keyLines(n *yaml.Node) lines {
	out := lines{}
	out.walk(n, "")
	return out
}

func (l lines) walk(n *yaml.Node, path string) {
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

// at returns the line of the key at path or, when the file does not spell
// that key out (a missing field, a default), of its nearest enclosing key;
// fallback when none is written.
func (l lines) at(path string, fallback int) int {
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

package config

import (
	"go.yaml.in/yaml/v4"

	"github.com/interlock-mcp/interlock/internal/yamllines"
)

// lines maps each key of a YAML node to its line (package yamllines).
type lines = yamllines.Lines

// keyLines records the line of every key and list element under n.
func keyLines(n *yaml.Node) lines { return yamllines.Of(n) }

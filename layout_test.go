package interlock_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestLayout holds the packages to the layers ARCHITECTURE.md draws: each
// imports only interlock packages of lower layers (or, in layer 0, the
// domains it builds on), so dependencies point inward and no cycle can
// come back.
func TestLayout(t *testing.T) {
	const module = "github.com/interlock-mcp/interlock"
	layers := map[string]int{
		// Below everything: support for the stores' conformance suites,
		// which sit with the domains they test.
		"internal/testproc": -1,
		"internal/testdb":   -1,
		"approval":          0, "budget": 0, "tracing": 0, "redact": 0, "exchange": 0, "seal": 0, "internal/strictjson": 0, "internal/yamllines": 0, "internal/pollable": 0, "resilience": 0, "oauth": 0, "audit": 0, "consolestate": 0, "roster": 0, "task": 0,
		"":       1,
		"policy": 2, "config": 2, "refusal": 2, "console": 2, "demo": 2, "sqlite": 2, "postgres": 2, "redis": 2, "storetest": 2, "notify": 2, "metrics": 2, "mcpgo": 2,
		"gateway":       3,
		"cmd/interlock": 4,
	}
	// Within a layer, what a package may build on: in layer 0 the domains
	// audit records, the identities console state keeps, and the tasks
	// consolestate/sqlstore keeps beside it; in layer 2
	// the policy config reads from the file, and the one reading of a
	// refusal the console's pages share with the REST face.
	sideways := map[string][]string{"audit": {"approval", "seal"}, "budget": {"approval", "seal"}, "consolestate": {"approval", "task"}, "config": {"policy"}, "console": {"refusal"}}
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	rel := func(p string) (string, bool) {
		if p == module {
			return "", true
		}
		r, ok := strings.CutPrefix(p, module+"/")
		return r, ok
	}
	// A package's layer is that of the nearest listed ancestor, so
	// helpers such as approval/approvaltest sit with what they test.
	layerOf := func(p string) (int, string, bool) {
		for q := p; ; {
			if l, ok := layers[q]; ok {
				return l, q, true
			}
			i := strings.LastIndex(q, "/")
			if i < 0 {
				return 0, "", false
			}
			q = q[:i]
		}
	}
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		fields := strings.Fields(line)
		from, _ := rel(fields[0])
		lf, home, ok := layerOf(from)
		if !ok {
			// Tools and tests of their own (bench, e2e helpers).
			continue
		}
		for _, imp := range fields[1:] {
			to, ours := rel(imp)
			if !ours {
				continue
			}
			lt, room, ok := layerOf(to)
			switch {
			case !ok:
				t.Errorf("%s imports %s, which ARCHITECTURE.md does not place", from, to)
			case room == home:
			case lt < lf:
			case lt == lf && slices.Contains(sideways[home], room):
			default:
				t.Errorf("%s (layer %d) imports %s (layer %d): dependencies point inward", from, lf, to, lt)
			}
		}
	}
}

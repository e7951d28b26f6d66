package gateway

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/policy"
)

func TestStartEachReportsEachUpstream(t *testing.T) {
	f := testConfig(t, "", "fx", "skipped:s_")
	f.Upstreams = append(f.Upstreams, &config.Upstream{Name: "ghost", Command: []string{"/nonexistent/mcp-server"}, Line: 9})
	gw := newGateway(t, f, Options{Logger: quiet})
	defer gw.Close()
	failed := gw.StartEach(context.Background(), func(u *config.Upstream) bool { return u.Name != "skipped" })
	if len(failed) != 1 || failed["ghost"] == nil || !strings.Contains(failed["ghost"].Error(), "/nonexistent/mcp-server") {
		t.Fatalf("failed = %v, want only ghost", failed)
	}
	if counts := gw.ToolCounts(); counts["fx"] != fixtureTools || counts["skipped"] != 0 {
		t.Errorf("ToolCounts = %v: fx started, skipped not", counts)
	}
}

func TestOfferedToolsAsThePolicySeesThem(t *testing.T) {
	gw := start(t, testConfig(t, `
rules:
  - name: echo-writes
    match: {tools: [echo]}
    annotations: {readOnlyHint: false}
    mode: flag
`, "fx"), "")
	tools := gw.OfferedTools()
	if len(tools) != fixtureTools {
		t.Fatalf("got %d tools, want %d", len(tools), fixtureTools)
	}
	if !slices.IsSortedFunc(tools, func(a, b policy.OfferedTool) int { return strings.Compare(a.Name, b.Name) }) {
		t.Errorf("tools not sorted by name: %v", tools)
	}
	tests := []struct {
		tool      string
		readOnly  bool
		arguments []string
	}{
		{"echo", false, nil}, // the rule's override, not the upstream's hint
		{"slow", true, nil},
		{"wipe", false, []string{"target"}},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			i := slices.IndexFunc(tools, func(o policy.OfferedTool) bool { return o.Name == tt.tool })
			if i < 0 {
				t.Fatalf("%s not offered", tt.tool)
			}
			got := tools[i]
			if got.Upstream != "fx" || got.Hints.ReadOnly != tt.readOnly {
				t.Errorf("%+v: want upstream fx, read-only %v", got, tt.readOnly)
			}
			// Gated tools advertise __confirm; it is no argument of the tool.
			if !slices.Equal(got.Arguments, tt.arguments) {
				t.Errorf("arguments = %v, want %v", got.Arguments, tt.arguments)
			}
		})
	}
}

package interlock

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/internal/strictjson"
)

// connect serves s in memory and returns a connected client session at
// the latest protocol version, without elicitation.
func connect(t *testing.T, s *mcp.Server) *mcp.ClientSession {
	t.Helper()
	return connectVersion(t, s, "", nil)
}

type customerID struct {
	ID string `json:"id"`
}

type customer struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// guardedServer has a typed read-only tool and a typed destructive one whose
// Out type is not any: the case where the SDK's own AddTool would overwrite
// structured errors.
func guardedServer(t *testing.T, dryRun string, seen *[]customerID) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "billing"}, nil)
	g := newGate(t, ByAnnotations{}, &GateOptions{Getenv: env(dryRun), Logger: quiet})
	AddTool(s, g, &mcp.Tool{Name: "get_customer", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in customerID) (*mcp.CallToolResult, customer, error) {
			if in.ID != "acct_9931" {
				return nil, customer{}, Errorf(CodeNotFound, "Call list_customers to find a valid id, then retry.", "No customer %s.", in.ID)
			}
			return nil, customer{ID: in.ID, Name: "Northwind Traders"}, nil
		})
	AddTool(s, g, &mcp.Tool{Name: "delete_customer"},
		func(_ context.Context, _ *mcp.CallToolRequest, in customerID) (*mcp.CallToolResult, customer, error) {
			*seen = append(*seen, in)
			return nil, customer{ID: in.ID}, nil
		})
	return s
}

func TestTypedToolKeepsStructuredErrors(t *testing.T) {
	var seen []customerID
	cs := connect(t, guardedServer(t, "false", &seen))
	ctx := context.Background()
	tests := []struct {
		name     string
		tool     string
		args     map[string]any
		wantCode Code
		want     string // structured content of a result that ran
	}{
		{"read-only runs", "get_customer", map[string]any{"id": "acct_9931"}, "", `{"id":"acct_9931","name":"Northwind Traders"}`},
		{"handler error keeps its code", "get_customer", map[string]any{"id": "acct_0"}, CodeNotFound, ""},
		{"schema violation", "get_customer", map[string]any{"id": 5}, CodeValidationFailed, ""},
		{"unknown argument", "get_customer", map[string]any{"id": "a", "force": true}, CodeValidationFailed, ""},
		{"unconfirmed destructive call", "delete_customer", map[string]any{"id": "acct_9931"}, CodeDryRunPreview, ""},
		{"confirmed destructive call", "delete_customer", map[string]any{"id": "acct_9931", "__confirm": true}, "", `{"id":"acct_9931","name":""}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tt.tool, Arguments: tt.args})
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantCode != "" {
				if got := decodeBody(t, res).Code; got != tt.wantCode {
					t.Errorf("code = %s, want %s", got, tt.wantCode)
				}
				return
			}
			if res.IsError {
				t.Fatalf("unexpected error result: %+v", res.Content[0])
			}
			b, _ := json.Marshal(res.StructuredContent)
			if string(b) != tt.want {
				t.Errorf("structuredContent = %s, want %s", b, tt.want)
			}
		})
	}
	if len(seen) != 1 || seen[0].ID != "acct_9931" {
		t.Errorf("delete_customer ran with %v, want once with acct_9931", seen)
	}
}

func TestAdvertisedTools(t *testing.T) {
	var seen []customerID
	cs := connect(t, guardedServer(t, "", &seen))
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		tools[tool.Name] = tool
	}
	tests := []struct {
		tool        string
		confirm     bool
		readOnly    bool
		destructive bool
	}{
		{"get_customer", false, true, false},
		{"delete_customer", true, false, true},
	}
	for _, tt := range tests {
		tool := tools[tt.tool]
		if tool == nil {
			t.Fatalf("%s not listed", tt.tool)
		}
		props := tool.InputSchema.(map[string]any)["properties"].(map[string]any)
		if _, ok := props[MetaConfirm]; ok != tt.confirm {
			t.Errorf("%s: __confirm advertised = %v, want %v", tt.tool, ok, tt.confirm)
		}
		a := tool.Annotations
		if a == nil || a.DestructiveHint == nil || a.OpenWorldHint == nil {
			t.Fatalf("%s: hints not explicit: %+v", tt.tool, a)
		}
		if a.ReadOnlyHint != tt.readOnly || *a.DestructiveHint != tt.destructive || !*a.OpenWorldHint {
			t.Errorf("%s: annotations %+v", tt.tool, a)
		}
	}
}

func TestOutputSchemaAdmitsErrorBodies(t *testing.T) {
	g := newGate(t, ByAnnotations{}, &GateOptions{Logger: quiet})
	tool := &mcp.Tool{
		Name:        "close_ticket",
		InputSchema: map[string]any{"type": "object"},
		OutputSchema: map[string]any{
			"$defs":                map[string]any{"id": map[string]any{"type": "string"}},
			"type":                 "object",
			"properties":           map[string]any{"ticket_id": map[string]any{"$ref": "#/$defs/id"}, "closed": map[string]any{"type": "boolean"}},
			"required":             []any{"ticket_id", "closed"},
			"additionalProperties": false,
		},
	}
	adv, err := g.Advertise(tool, "", HintsOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	schema, err := strictjson.ResolveSchema(adv.OutputSchema)
	if err != nil {
		t.Fatalf("advertised output schema does not resolve: %v", err)
	}
	var preview any
	b, _ := json.Marshal(Result(&Error{Code: CodeDryRunPreview, Message: "m", Hint: "h", Preview: map[string]any{"ticket_id": "T-1"}}).StructuredContent)
	_ = json.Unmarshal(b, &preview)
	tests := []struct {
		name  string
		value any
		ok    bool
	}{
		{"the tool's output", map[string]any{"ticket_id": "T-1", "closed": true}, true},
		{"an error body", preview, true},
		{"neither", map[string]any{"ticket_id": 5}, false},
	}
	for _, tt := range tests {
		if err := schema.Validate(tt.value); (err == nil) != tt.ok {
			t.Errorf("%s: Validate = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

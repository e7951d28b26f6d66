package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/oauth/oauthtest"
)

// bearerTransport sends a bearer credential with every request.
type bearerTransport struct{ credential string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.credential)
	return http.DefaultTransport.RoundTrip(r)
}

// TestServeWithOAuth: `interlock serve` with only auth.oauth takes its
// resource URL from where it listens, serves the metadata that names it,
// answers a client without a token with the challenge that points there,
// and serves a client with a token of the issuer.
func TestServeWithOAuth(t *testing.T) {
	iss := oauthtest.Start(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "interlock.yaml")
	err := os.WriteFile(config, []byte(fmt.Sprintf(`
upstreams:
  - name: demo
    command: [%q, demo, --db, %q]
auth:
  oauth:
    issuer: %s
`, binary, filepath.Join(dir, "demo.db"), iss.URL)), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	mcpURL := servedHTTP(t, "--config", config)
	base := strings.TrimSuffix(mcpURL, "/mcp")

	res, err := http.Post(mcpURL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	want := fmt.Sprintf(`Bearer resource_metadata="%s/.well-known/oauth-protected-resource/mcp"`, base)
	if res.StatusCode != http.StatusUnauthorized || res.Header.Get("WWW-Authenticate") != want {
		t.Errorf("without a token: %d %q, want 401 %q", res.StatusCode, res.Header.Get("WWW-Authenticate"), want)
	}
	res, err = http.Get(base + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	md, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(md), fmt.Sprintf(`"resource":"%s"`, mcpURL)) || !strings.Contains(string(md), iss.URL) {
		t.Errorf("metadata: %s", md)
	}

	token := iss.Sign(nil, iss.AccessClaims(mcpURL, "dana"), nil)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "it"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: mcpURL, HTTPClient: &http.Client{Transport: bearerTransport{token}}}, nil)
	if err != nil {
		t.Fatalf("connecting with a token of the issuer: %v", err)
	}
	defer cs.Close()
	if res := callTool(t, cs, "list_customers", map[string]any{}); res.IsError {
		t.Errorf("list_customers: %+v", res)
	}
}

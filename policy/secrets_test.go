package policy

import (
	"context"
	"strings"
	"testing"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/redact"
)

// TestTemplatesNeverShowSecrets renders summaries and typed-back values
// that reach for secret arguments in every way a template can: the secret
// values never appear.
func TestTemplatesNeverShowSecrets(t *testing.T) {
	args := map[string]any{
		"id": "acct_9931", "password": "hunter2", "api_key": "sk_live_1",
		"nested": map[string]any{"client_secret": "s3cr3t"}, "pin": "4711",
	}
	secrets := []string{"hunter2", "sk_live_1", "s3cr3t", "4711"}
	summaries := []string{
		`{{.args}}`,
		`{{.args.password}}`,
		`{{index .args "api_key"}}`,
		`{{range $k, $v := .args}}{{$k}}={{$v}} {{end}}`,
		`{{printf "%v" .args.nested}}`,
		`{{index .args (printf "%s%s" "pass" "word")}}`,
		`{{.preview}}`,
		`{{.preview.owner.password}}`,
		`{{.args.pin}}`,
	}
	for _, summary := range summaries {
		t.Run(summary, func(t *testing.T) {
			f := parse(t, "redact: [pin]\nrules:\n  - name: r\n    mode: token\n    summary: '"+summary+"'\n")
			d, err := f.Decide(context.Background(), &interlock.Call{Tool: "rotate", Hints: interlock.HintsOf(nil), Args: args})
			if err != nil {
				t.Fatal(err)
			}
			got := d.Summarize(map[string]any{"owner": map[string]any{"password": "hunter2"}, "token": "sk_live_1"})
			for _, s := range secrets {
				if strings.Contains(got, s) {
					t.Errorf("summary %q shows the secret %q", got, s)
				}
			}
			if !strings.Contains(got, redact.Value) {
				t.Errorf("summary %q does not show that a value was redacted", got)
			}
		})
	}

	// A name built at run time passes the load check; the rendered value is
	// then redacted, and the call is refused rather than ask for it.
	f := parse(t, `
rules:
  - name: r
    mode: elicit
    type_back: '{{index .args (printf "%s%s" "pass" "word")}}'
`)
	_, err := f.Decide(context.Background(), &interlock.Call{Tool: "rotate", Hints: interlock.HintsOf(nil), Args: args})
	if err == nil || !strings.Contains(err.Error(), "type a secret") {
		t.Errorf("Decide = %v, want a refusal to ask for a secret", err)
	}
}

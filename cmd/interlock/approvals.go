package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

const approvalsUsage = `Usage:
  interlock approvals list              [--url URL]
  interlock approvals approve ID [--reason R] [--url URL]
  interlock approvals deny    ID [--reason R] [--url URL]

The API key is read from INTERLOCK_KEY.
`

// approvalsFlags are the flags of every approvals subcommand, for its help.
const approvalsFlags = `
Flags:
  --url URL                the gateway's base URL (default http://127.0.0.1:8740)
  --reason R               why, recorded with the decision (approve and deny)
`

// approvals decides approvals on a running gateway through its REST face.
func approvals(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, approvalsUsage)
		return errUsage
	}
	sub, args := args[0], args[1:]
	if isHelp(sub) {
		// Asked for, so it goes to standard output and is no failure.
		fmt.Fprint(stdout, approvalsUsage+approvalsFlags+environment)
		return errHelp
	}
	id := ""
	if sub == "approve" || sub == "deny" {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			fmt.Fprintf(stderr, "interlock approvals %s: give the approval's id, such as apr_…\n", sub)
			return errUsage
		}
		id, args = args[0], args[1:]
	} else if sub != "list" {
		fmt.Fprintf(stderr, "interlock approvals: unknown subcommand %q\n\n%s", sub, approvalsUsage)
		return errUsage
	}
	fs := newFlags("approvals "+sub, stderr)
	url := fs.String("url", "http://127.0.0.1:8740", "the gateway's base `URL`")
	var reason *string
	if id != "" {
		reason = fs.String("reason", "", "why, for the caller and the audit log")
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	key := os.Getenv("INTERLOCK_KEY")
	if key == "" {
		return errors.New("INTERLOCK_KEY is not set: put an approver's API key in it")
	}
	base := strings.TrimSuffix(*url, "/") + "/v1/approvals"
	var req *http.Request
	var err error
	if id == "" {
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, base, nil)
	} else {
		body, _ := json.Marshal(map[string]string{"reason": *reason})
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, base+"/"+id+"/"+sub, bytes.NewReader(body))
		if req != nil {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("reaching the gateway at %s: %w", *url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode == http.StatusUnauthorized {
		return fmt.Errorf("the gateway does not take the key in INTERLOCK_KEY (%s): it was removed or changed, or is not one of its keys", resp.Status)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		return fmt.Errorf("the gateway answered %s, not JSON", resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%v: %v (%v)", out["code"], out["message"], out["recovery_hint"])
	}
	if id != "" {
		fmt.Fprintf(stdout, "%s: %v\n", id, out["state"])
		return nil
	}
	list, _ := out["approvals"].([]any)
	if len(list) == 0 {
		fmt.Fprintln(stdout, "no pending approvals you may decide")
	}
	for _, item := range list {
		a, _ := item.(map[string]any)
		fmt.Fprintf(stdout, "%v  %v/%v  %v  expires %v\n    %v\n", a["id"], a["tenant"], a["principal"], a["tool"], a["expires_at"], a["summary"])
	}
	return nil
}

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
	c, err := approvalsCommandOf(args, stdout, stderr)
	if err != nil {
		return err
	}
	key := os.Getenv("INTERLOCK_KEY")
	if key == "" {
		return errors.New("INTERLOCK_KEY is not set: put an approver's API key in it")
	}
	req, err := c.request(ctx, key)
	if err != nil {
		return err
	}
	out, err := c.ask(req)
	if err != nil {
		return err
	}
	c.show(stdout, out)
	return nil
}

// approvalsCommand is one approvals subcommand: list, or approve or deny
// the approval id, with the reason given.
type approvalsCommand struct {
	sub, id, url, reason string
}

// approvalsCommandOf reads the subcommand, the approval it decides and
// its flags.
func approvalsCommandOf(args []string, stdout, stderr io.Writer) (approvalsCommand, error) {
	var c approvalsCommand
	if len(args) == 0 {
		fmt.Fprint(stderr, approvalsUsage)
		return c, errUsage
	}
	c.sub, args = args[0], args[1:]
	if isHelp(c.sub) {
		// Asked for, so it goes to standard output and is no failure.
		fmt.Fprint(stdout, approvalsUsage+approvalsFlags+environment)
		return c, errHelp
	}
	if c.sub == "approve" || c.sub == "deny" {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			fmt.Fprintf(stderr, "interlock approvals %s: give the approval's id, such as apr_…\n", c.sub)
			return c, errUsage
		}
		c.id, args = args[0], args[1:]
	} else if c.sub != "list" {
		fmt.Fprintf(stderr, "interlock approvals: unknown subcommand %q\n\n%s", c.sub, approvalsUsage)
		return c, errUsage
	}
	fs := newFlags("approvals "+c.sub, stderr)
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8740", "the gateway's base `URL`")
	if c.id != "" {
		fs.StringVar(&c.reason, "reason", "", "why, for the caller and the audit log")
	}
	return c, parseFlags(fs, args)
}

// request is the subcommand's request of the REST face, with the key.
func (c approvalsCommand) request(ctx context.Context, key string) (*http.Request, error) {
	base := strings.TrimSuffix(c.url, "/") + "/v1/approvals"
	var req *http.Request
	var err error
	if c.id == "" {
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, base, nil)
	} else {
		body, _ := json.Marshal(map[string]string{"reason": c.reason})
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, base+"/"+c.id+"/"+c.sub, bytes.NewReader(body))
		if req != nil {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	return req, nil
}

// ask sends the request to the gateway and reads its JSON answer, or
// says why there is none: the gateway out of reach, the key refused, or
// the request refused in the gateway's words.
func (c approvalsCommand) ask(req *http.Request) (map[string]any, error) {
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reaching the gateway at %s: %w", c.url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode == http.StatusUnauthorized {
		return nil, fmt.Errorf("the gateway does not take the key in INTERLOCK_KEY (%s): it was removed or changed, or is not one of its keys", resp.Status)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("the gateway answered %s, not JSON", resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%v: %v (%v)", out["code"], out["message"], out["recovery_hint"])
	}
	return out, nil
}

// show prints the gateway's answer: the decided approval's state, or the
// pending approvals the key's holder may decide.
func (c approvalsCommand) show(stdout io.Writer, out map[string]any) {
	if c.id != "" {
		fmt.Fprintf(stdout, "%s: %v\n", c.id, out["state"])
		return
	}
	list, _ := out["approvals"].([]any)
	if len(list) == 0 {
		fmt.Fprintln(stdout, "no pending approvals you may decide")
	}
	for _, item := range list {
		a, _ := item.(map[string]any)
		fmt.Fprintf(stdout, "%v  %v/%v  %v  expires %v\n    %v\n", a["id"], a["tenant"], a["principal"], a["tool"], a["expires_at"], a["summary"])
	}
}

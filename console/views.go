package console

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/refusal"
)

// funcs are the helpers templates use; none of them marks text as safe
// HTML, so html/template escapes everything an approval carries.
var funcs = template.FuncMap{
	"when": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"iso":  func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"until": func(t time.Time) string {
		d := time.Until(t).Round(time.Second)
		switch {
		case d <= 0:
			return "expired"
		case d < time.Minute:
			return fmt.Sprintf("in %d s", int(d.Seconds()))
		}
		return fmt.Sprintf("in %d min", int(d.Round(time.Minute).Minutes()))
	},
}

// argRow is one argument of a call, as approvers read it.
type argRow struct {
	Name  string
	Value string
}

// argRows lists the redacted arguments by name; nested values are shown
// as compact JSON.
func argRows(args map[string]any) []argRow {
	rows := make([]argRow, 0, len(args))
	for name, v := range args {
		var value string
		switch v := v.(type) {
		case string:
			value = v
		default:
			// Without HTML escaping: the page escapes what it shows, and
			// an approver must read <script> as written, not \u003cscript\u003e.
			var b strings.Builder
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(v); err != nil {
				value = fmt.Sprint(v)
			} else {
				value = strings.TrimSuffix(b.String(), "\n")
			}
		}
		rows = append(rows, argRow{name, value})
	}
	slices.SortFunc(rows, func(a, b argRow) int { return strings.Compare(a.Name, b.Name) })
	return rows
}

// approvalView is an approval as one approver sees it.
type approvalView struct {
	*approval.Approval
	State string
	Args  []argRow
	// MayDecide is set when the viewer may approve or deny it now;
	// otherwise Why says why not.
	MayDecide bool
	Why       string
	IsCaller  bool
	// Live versions change when what the page shows of the approval does.
	StatusVersion, DecideVersion string
	// Scope is the form that approves this call and similar ones.
	Scope scopeView
	// Passkey is set when the rule requires the approver's passkey.
	Passkey *passkeyPrompt
}

// StateWords is the approval's state in words.
func (v approvalView) StateWords() string {
	switch v.State {
	case approval.Pending:
		return "Waiting for approval"
	case approval.Approved:
		return "Approved: runs when the caller calls again or polls its task"
	case approval.Denied:
		return "Denied"
	case approval.Consumed:
		return "Approved and run"
	}
	return "Expired undecided"
}

func view(a *approval.Approval, who interlock.Identity) approvalView {
	v := approvalView{Approval: a, State: a.State(time.Now()), Args: argRows(a.Args), IsCaller: isCaller(a, who)}
	voted := slices.ContainsFunc(a.Approvals, func(x approval.Vote) bool { return x.Principal == who.Principal })
	switch err := approval.MayDecide(who, a); {
	case errors.Is(err, approval.ErrSelfApproval):
		v.Why = "You made this call, so you cannot approve or deny it: one of the approvers the policy names must."
	case err != nil:
		v.Why = "The policy does not name you as an approver of this call."
	case v.State != approval.Pending:
		v.Why = "This approval is no longer waiting for a decision."
	case voted:
		v.Why = "You approved this call; it waits for the other approvers."
	default:
		v.MayDecide = true
	}
	v.StatusVersion = fmt.Sprintf("%s-%d", v.State, len(a.Approvals))
	v.DecideVersion = fmt.Sprintf("%s-%t", v.State, v.MayDecide)
	return v
}

// pendingData is what the pending page lists.
type pendingData struct {
	ToDecide, Waiting []approvalView
	Version           string
}

func (c *Console) pending(w http.ResponseWriter, r *http.Request, s *session) {
	all, err := c.approvals.Store().List(r.Context())
	if err != nil {
		c.fail(w, r, s, fmt.Errorf("listing approvals: %w", err))
		return
	}
	var d pendingData
	h := sha256.New()
	for _, a := range all {
		if !approval.MaySee(s.who, a.Subject()) {
			continue
		}
		v := view(a, s.who)
		fmt.Fprintf(h, "%s %s %d\n", a.ID, v.State, len(a.Approvals))
		if v.IsCaller {
			d.Waiting = append(d.Waiting, v)
		} else {
			d.ToDecide = append(d.ToDecide, v)
		}
	}
	d.Version = hex.EncodeToString(h.Sum(nil))[:16]
	c.render(w, r, http.StatusOK, "pending", c.pageFor(s, "Pending approvals", "pending", page{Data: d}))
}

// approvalFor returns the approval id names if who may see it.
func (c *Console) approvalFor(r *http.Request, who interlock.Identity) (*approval.Approval, error) {
	a, err := c.approvals.Store().Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if !approval.MaySee(who, a.Subject()) {
		// Neither an approver nor the caller: as if it did not exist.
		return nil, approval.ErrUnknown
	}
	return a, nil
}

func (c *Console) approval(w http.ResponseWriter, r *http.Request, s *session) {
	c.showApproval(w, r, s, http.StatusOK, "", newScopeForm())
}

// showApproval shows the approval's page; problem says what was wrong
// with the form the approver sent, form is the scope form as they left it.
func (c *Console) showApproval(w http.ResponseWriter, r *http.Request, s *session, status int, problem string, form scopeForm) {
	a, err := c.approvalFor(r, s.who)
	if errors.Is(err, approval.ErrUnknown) {
		c.render(w, r, http.StatusNotFound, "message", c.pageFor(s, "Not found", "",
			page{Message: "There is no such approval, or it is not one you may see. Approvals are forgotten an hour after they expire."}))
		return
	}
	if err != nil {
		c.fail(w, r, s, fmt.Errorf("reading approval: %w", err))
		return
	}
	v := view(a, s.who)
	v.Scope = c.scopeFor(v, form)
	if a.RequirePasskey && v.MayDecide {
		if v.Passkey, err = c.promptFor(r, a, s.who); err != nil {
			c.fail(w, r, s, err)
			return
		}
	}
	c.render(w, r, status, "approval", c.pageFor(s, "Approval of "+a.Tool, "", page{Error: problem, Data: v}))
}

// decide records the approver's decision from the approval's form.
func (c *Console) decide(w http.ResponseWriter, r *http.Request, s *session) {
	var verdict approval.Verdict
	switch r.PostFormValue("decision") {
	case "approve":
		verdict = approval.Approve
	case "deny":
		verdict = approval.Deny
	default:
		c.showApproval(w, r, s, http.StatusBadRequest, "Choose Approve or Deny.", newScopeForm())
		return
	}
	id := r.PathValue("id")
	// The assertion only counts on an approval whose rule requires a
	// passkey; the gate has the console verify it.
	var assertion json.RawMessage
	if signed := r.PostFormValue("assertion"); signed != "" {
		assertion = json.RawMessage(signed)
	}
	a, err := c.approvals.DecideWithPasskey(r.Context(), id, s.who, verdict, strings.TrimSpace(r.PostFormValue("reason")), assertion)
	if err != nil {
		status, problem := refused(err)
		if status == 0 {
			c.fail(w, r, s, fmt.Errorf("deciding approval: %w", err))
			return
		}
		c.showApproval(w, r, s, status, problem, newScopeForm())
		return
	}
	c.Notify()
	verb := "denied"
	if verdict == approval.Approve {
		verb = "approved"
	}
	c.setFlash(r.Context(), s, fmt.Sprintf("You %s %s's call of %s.", verb, a.Principal, a.Tool))
	http.Redirect(w, r, ApprovalsPath+"/"+id, http.StatusSeeOther)
}

// refused is the status and the words of a request the gate refused, as
// every face reads it ([refusal.Of]); 0 for a failure that is not
// the approver's to fix.
func refused(err error) (int, string) {
	e := refusal.Of(err)
	if e == nil {
		return 0, ""
	}
	return refusal.Status(e.Code), e.Message
}

// historyRow is one line of the history page.
type historyRow struct {
	Time time.Time
	Tool string
	// What happened, in words.
	What string
	Who  string
	// Reason is the approver's reason for a decision.
	Reason string
	// Outcome is the call's outcome, for calls.
	Outcome string
}

// historyData is what the history page shows.
type historyData struct {
	Rows    []historyRow
	Kept    bool
	Version string
}

// historyScan is how many of the latest audit records the history page
// reads; it shows at most historyRows of them.
const (
	historyScan = 2000
	historyRows = 50
)

func (c *Console) historyPage(w http.ResponseWriter, r *http.Request, s *session) {
	d := historyData{Kept: c.history != nil}
	if c.history != nil {
		recs, head, err := recent(r.Context(), c.history, historyScan)
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		d.Version = fmt.Sprint(head)
		for _, rec := range recs {
			if row, ok := historyOf(rec, s.who); ok && len(d.Rows) < historyRows {
				d.Rows = append(d.Rows, row)
			}
		}
	}
	c.render(w, r, http.StatusOK, "history", c.pageFor(s, "History", "history", page{Data: d}))
}

// outcomeWords says a call's outcome as an approver reads it: words for
// what the audit log records as a word, the code of an error as it is.
func outcomeWords(outcome string) string {
	switch outcome {
	case audit.OutcomeOK:
		return "ran"
	case audit.OutcomeToolError:
		return "ran; the tool answered with an error"
	case audit.OutcomeInputRequired:
		return "the tool asked for more input"
	}
	return outcome
}

// historyOf turns an audit record into a history line: decisions on
// approvals, and the calls approvals decided. Who sees a line is who may
// see the approval it is about ([approval.MaySee]).
func historyOf(rec *audit.Record, who interlock.Identity) (historyRow, bool) {
	if !approval.MaySee(who, rec.Subject()) {
		return historyRow{}, false
	}
	row := historyRow{Time: rec.Time, Tool: rec.Tool, Reason: rec.Reason}
	switch {
	case rec.Event == "approval_decided":
		verb := "approved"
		if rec.Decision == audit.DecisionDeclined {
			verb = "denied"
		}
		row.Who, row.What = rec.Principal, verb
		if _, about, ok := strings.Cut(rec.Detail, ": "); ok {
			row.What = about
		}
	case rec.Event == "call" && rec.Mode == string(interlock.ModeApproval) && rec.Outcome != "":
		row.Who, row.Outcome = rec.Principal, outcomeWords(rec.Outcome)
		switch rec.Decision {
		case audit.DecisionConfirmed:
			row.What = "ran, approved by " + strings.Join(rec.Approvers, ", ")
		case audit.DecisionDeclined:
			row.What = "refused: an approver denied it"
		case audit.DecisionCancelled:
			row.What = "refused: nobody decided in time"
		default:
			return historyRow{}, false
		}
	default:
		return historyRow{}, false
	}
	return row, true
}

package interlock

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultApprovalTimeout is how long an approval may stay undecided unless
// the rule says otherwise.
const DefaultApprovalTimeout = 15 * time.Minute

// The states of an approval.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	ApprovalConsumed = "consumed"
	ApprovalExpired  = "expired"
)

// Vote is one approver's decision.
type Vote struct {
	Principal string    `json:"principal"`
	Reason    string    `json:"reason,omitempty"`
	At        time.Time `json:"at"`
	// Tenant and Passkey are set on the decision of an approval that
	// requires a passkey: the approver's tenant and the WebAuthn
	// assertion they signed, kept so the gate verifies it again before
	// the call runs.
	Tenant  string          `json:"tenant,omitempty"`
	Passkey json.RawMessage `json:"passkey,omitempty"`
}

// Approval is a call waiting for people other than its caller to approve
// it. It is bound like a confirm token: to the caller, the tool, the digest
// of the arguments and the digest of the tool's definition, so only the
// identical call can use it, once.
type Approval struct {
	ID string `json:"id"`
	// Key is the digest of everything the approval is bound to; one
	// binding has at most one live approval.
	Key       string `json:"key"`
	Tenant    string `json:"tenant"`
	Principal string `json:"principal"`
	Tool      string `json:"tool"`
	Upstream  string `json:"upstream,omitempty"`
	Rule      string `json:"rule,omitempty"`
	// Args are the call's arguments, redacted: what approvers see.
	Args    map[string]any `json:"args"`
	Summary string         `json:"summary"`
	// Approvers name who may decide: principals, or "group:NAME".
	Approvers []string `json:"approvers"`
	Quorum    int      `json:"quorum"`
	// RequirePasskey says only decisions signed with an approver's
	// passkey count.
	RequirePasskey bool      `json:"require_passkey,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	ExpiresAt      time.Time `json:"expires_at"`
	Approvals      []Vote    `json:"approvals,omitempty"`
	Denial         *Vote     `json:"denial,omitempty"`
	// Consumed is set when the approved call ran; Reported when the
	// caller was told that it expired, so the next call asks anew.
	Consumed bool `json:"consumed,omitempty"`
	Reported bool `json:"reported,omitempty"`
}

// State returns the approval's state at now.
func (a *Approval) State(now time.Time) string {
	switch {
	case a.Consumed:
		return ApprovalConsumed
	case a.Denial != nil:
		return ApprovalDenied
	case len(a.Approvals) >= max(a.Quorum, 1):
		return ApprovalApproved
	case !now.Before(a.ExpiresAt):
		return ApprovalExpired
	}
	return ApprovalPending
}

// ErrNotApproved is the error of consuming an approval that is not (or no
// longer) approved.
var ErrNotApproved = errors.New("the approval is not approved")

// AddVote records v on a pending approval: an approval by a person who has
// not approved yet, or the denial. Every store applies it to the stored
// approval under its own lock.
func (a *Approval) AddVote(v Vote, approve bool, now time.Time) error {
	if a.State(now) != ApprovalPending {
		return ErrAlreadyDecided
	}
	if !approve {
		a.Denial = &v
		return nil
	}
	if slices.ContainsFunc(a.Approvals, func(x Vote) bool { return x.Principal == v.Principal }) {
		return ErrAlreadyVoted
	}
	a.Approvals = append(a.Approvals, v)
	return nil
}

// Consume marks an approved approval as used, or answers ErrNotApproved.
func (a *Approval) Consume(now time.Time) error {
	if a.State(now) != ApprovalApproved {
		return ErrNotApproved
	}
	a.Consumed = true
	return nil
}

// Answers reports whether a request for the approval's binding is answered
// with the approval itself (it is pending, approved or denied, or it
// expired and its caller has not been told yet); changed says the
// approval was marked Reported and must be stored again.
func (a *Approval) Answers(now time.Time) (answers, changed bool) {
	switch a.State(now) {
	case ApprovalPending, ApprovalApproved, ApprovalDenied:
		return true, false
	case ApprovalExpired:
		if !a.Reported {
			a.Reported = true
			return true, true
		}
	}
	return false, false
}

// Approver is who decides an approval: a principal, the tenant it acts
// for, and the groups its key names.
type Approver struct {
	Principal string
	Tenant    string
	Groups    []string
}

// MayDecide reports whether who may decide a: named by the rule (as a
// principal or through a group), acting for the call's tenant, and never
// the caller of the call itself. A rule names approvers by principal, so
// the tenant is what keeps a key of one tenant from approving another's
// calls.
func (a *Approval) MayDecide(who Approver) error {
	if who.Principal == a.Principal && who.Tenant == a.Tenant {
		return ErrSelfApproval
	}
	if who.Tenant != a.Tenant {
		return ErrNotAnApprover
	}
	for _, name := range a.Approvers {
		if g, ok := strings.CutPrefix(name, "group:"); ok {
			if slices.Contains(who.Groups, g) {
				return nil
			}
		} else if name == who.Principal {
			return nil
		}
	}
	return ErrNotAnApprover
}

// Errors of deciding an approval.
var (
	ErrSelfApproval    = errors.New("the caller cannot approve their own call")
	ErrNotAnApprover   = errors.New("the rule does not name this approver")
	ErrAlreadyDecided  = errors.New("the approval is no longer pending")
	ErrAlreadyVoted    = errors.New("this approver has already approved")
	ErrApprovalUnknown = errors.New("no such approval")
)

// ApprovalStore keeps approvals; one live approval per binding key. The
// memory store below serves one process; package redis serves several
// gateways.
type ApprovalStore interface {
	// Request returns the binding's live approval (pending, approved or
	// denied), or stores a as a new one. An approval that expired is
	// returned once more, marked Reported, so its caller learns it was
	// never decided; the request after that stores a.
	Request(ctx context.Context, a *Approval) (*Approval, error)
	// Get returns an approval by id, or ErrApprovalUnknown.
	Get(ctx context.Context, id string) (*Approval, error)
	// List returns the approvals that are still pending.
	List(ctx context.Context) ([]*Approval, error)
	// Decide adds an approval (approve) or the denial of v, atomically;
	// ErrAlreadyDecided when the approval is no longer pending.
	Decide(ctx context.Context, id string, v Vote, approve bool) (*Approval, error)
	// Consume marks an approved approval as used and reports whether this
	// call did so: of any number of concurrent calls, one.
	Consume(ctx context.Context, id string) (bool, error)
}

// approvalKey binds an approval to a call.
func approvalKey(c *Call) (string, error) {
	digest, err := c.digest()
	if err != nil {
		return "", fmt.Errorf("digesting arguments of %s: %w", c.Tool, err)
	}
	h := sha256.New()
	for _, s := range []string{c.Tenant, c.Principal, c.Tool} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	h.Write(digest[:])
	h.Write(c.definition[:])
	return hex.EncodeToString(h.Sum(nil)), nil
}

// newApprovalID returns a random, URL-safe id.
func newApprovalID() string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "apr_" + base64.RawURLEncoding.EncodeToString(b)
}

// approval applies mode approval. The first call creates a pending
// approval and answers APPROVAL_PENDING; the same call again while it is
// pending answers the same approval. Once enough approvers said yes, the
// caller's identical call consumes the approval and runs, exactly once.
// One denial ends it (DECLINED); no decision in time is CANCELLED.
func (g *Gate) approval(ctx context.Context, c *Call, d Decision, ex Exchange) error {
	if g.dryRun {
		return g.dryRunPreview(ctx, c, d, ApprovalDryRunHint, []string{operatorKeyMissing})
	}
	if g.approvals == nil {
		return fmt.Errorf("decision for %s demands approval, and the gate has no approval store", c.Tool)
	}
	// A standing grant that covers the call confirms it at once, unless
	// the rule asks for a passkey: a grant would stand in for the
	// signature.
	if !d.RequirePasskey {
		if sg, err := g.useGrant(ctx, c); err != nil || sg != nil {
			if sg != nil {
				c.confirmedBy, c.grant = ConfirmedByGrant, sg.ID
				c.approvers = []string{sg.GrantedBy}
			}
			return err
		}
	}
	key, err := approvalKey(c)
	if err != nil {
		return err
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = DefaultApprovalTimeout
	}
	// Approvers see what the call will do; a preview that says the call
	// cannot succeed ends it before anyone is asked.
	summary, err := g.describe(ctx, c, d)
	if err != nil {
		return err
	}
	now := time.Now()
	candidate := &Approval{ID: newApprovalID(), Key: key, Tenant: c.Tenant, Principal: c.Principal, Tool: c.Tool,
		Upstream: c.Upstream, Rule: d.Rule, Args: g.redactedArgs(c), Summary: summary, Approvers: d.Approvers,
		Quorum: max(d.Quorum, 1), RequirePasskey: d.RequirePasskey, CreatedAt: now, ExpiresAt: now.Add(timeout)}
	a, err := g.approvals.Request(ctx, candidate)
	if err != nil {
		return storeUnavailable(c, err)
	}
	if a.ID == candidate.ID {
		if g.onApproval != nil {
			g.onApproval(ctx, a)
		}
		g.showApprovalURL(ctx, a, ex)
	}
	switch a.State(time.Now()) {
	case ApprovalApproved:
		if d.RequirePasskey {
			if err := g.verifySignedVotes(ctx, a); err != nil {
				return err
			}
		}
		ok, err := g.approvals.Consume(ctx, a.ID)
		if err != nil {
			return storeUnavailable(c, err)
		}
		if !ok {
			return &Error{Code: CodeConsentTokenInvalid,
				Message: fmt.Sprintf("The approval %s was already used by an identical call; this one did not run.", a.ID),
				Hint:    fmt.Sprintf("Call %s again to ask for a new approval, if the user still wants it to run twice.", c.Tool)}
		}
		c.confirmedBy = ConfirmedByApproval
		for _, v := range a.Approvals {
			c.approvers = append(c.approvers, v.Principal)
		}
		return nil
	case ApprovalDenied:
		reason := ""
		if a.Denial.Reason != "" {
			reason = " Their reason: " + clip(a.Denial.Reason)
		}
		return &Error{Code: CodeDeclined,
			Message: fmt.Sprintf("%s denied %s; nothing ran.%s", a.Denial.Principal, c.Tool, reason),
			Hint:    fmt.Sprintf("The approver refused: do not call %s again unless the user gives new instructions.", c.Tool)}
	case ApprovalExpired:
		return &Error{Code: CodeCancelled,
			Message: fmt.Sprintf("Nobody decided the approval of %s before %s; nothing ran.", c.Tool, a.ExpiresAt.UTC().Format(time.RFC3339)),
			Hint:    "Ask the user whether to proceed; calling again asks the approvers anew."}
	}
	wait := time.Until(a.ExpiresAt)
	return &Error{
		Code:    CodeApprovalPending,
		Message: fmt.Sprintf("%s waits for approval by %s; it has not run.", c.Tool, describeApprovers(a)),
		Hint: fmt.Sprintf("Tell the user the call waits for approval (show them approval_url), then call %s again with the same "+
			"arguments after retry_after_ms; it runs once approved. Do not change the arguments: that asks for a new approval.", c.Tool),
		Preview:      a.Args,
		Summary:      a.Summary,
		RetryAfterMS: min(wait, 10*time.Second).Milliseconds(),
		ApprovalID:   a.ID,
		ApprovalURL:  g.approvalURL(a.ID),
		ExpiresAt:    a.ExpiresAt,
	}
}

// urlWait bounds how long the gate waits for a client to acknowledge the
// approval's URL; the call has answered long before.
const urlWait = time.Minute

// showApprovalURL also sends a new approval's URL to a client that
// declared URL-mode elicitation, so its human can open it. The call does
// not wait: it answers APPROVAL_PENDING at once, and whatever the client
// answers changes nothing (only approvers decide).
func (g *Gate) showApprovalURL(ctx context.Context, a *Approval, ex Exchange) {
	url := g.approvalURL(a.ID)
	if ex = ex.resolved(); ex.ShowURL == nil || url == "" {
		return
	}
	params := &mcp.ElicitParams{Mode: "url", URL: url, ElicitationID: a.ID,
		Message: fmt.Sprintf("%s waits for approval by %s. Open the link to follow it: %s", a.Tool, describeApprovers(a), a.Summary)}
	show := ex.ShowURL
	go func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), urlWait)
		defer cancel()
		if _, err := show(sctx, params); err != nil {
			g.log.DebugContext(sctx, "client did not take the approval URL", "approval", a.ID, "error", clip(err.Error()))
		}
	}()
}

// ApprovalDryRunHint is the recovery hint of an approval-mode
// DRY_RUN_PREVIEW.
const ApprovalDryRunHint = "Set MCP_DRY_RUN=false AND call again: the call will wait for approval by the people the policy names"

// ConfirmedByApproval marks a call its approvers confirmed.
const ConfirmedByApproval = "approval"

func describeApprovers(a *Approval) string {
	who := strings.Join(a.Approvers, ", ")
	if who == "" {
		who = "nobody the policy names"
	}
	if a.Quorum > 1 {
		return fmt.Sprintf("%d of %s", a.Quorum, who)
	}
	return who
}

func (g *Gate) approvalURL(id string) string {
	if g.approvalBase == "" {
		return ""
	}
	return strings.TrimSuffix(g.approvalBase, "/") + "/" + id
}

// Approvals returns the gate's approval store; nil when it has none.
func (g *Gate) Approvals() ApprovalStore { return g.approvals }

// Decide records who's decision on the approval id: the rule must name
// them, and they cannot be the caller. It returns the approval as it
// stands after the decision.
func (g *Gate) Decide(ctx context.Context, id string, who Approver, approve bool, reason string) (*Approval, error) {
	return g.decide(ctx, id, who, approve, reason, nil)
}

func (g *Gate) decide(ctx context.Context, id string, who Approver, approve bool, reason string, assertion json.RawMessage) (*Approval, error) {
	if g.approvals == nil {
		return nil, ErrApprovalUnknown
	}
	a, err := g.approvals.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := a.MayDecide(who); err != nil {
		return nil, err
	}
	if a.State(time.Now()) != ApprovalPending {
		return nil, ErrAlreadyDecided
	}
	vote := Vote{Principal: who.Principal, Reason: clip(reason), At: time.Now()}
	if a.RequirePasskey {
		vote.Tenant, vote.Passkey = who.Tenant, assertion
		if err := g.verifyVote(ctx, a, vote, approve); err != nil {
			return nil, err
		}
	}
	a, err = g.approvals.Decide(ctx, id, vote, approve)
	if err != nil {
		return nil, err
	}
	decision := DecisionConfirmed
	if !approve {
		decision = DecisionDeclined
	}
	g.RecordEvent(ctx, &AuditRecord{Event: "approval_decided", Tenant: a.Tenant, Principal: who.Principal, Tool: a.Tool,
		Upstream: a.Upstream, Rule: a.Rule, Decision: decision, Detail: fmt.Sprintf("%s: %s of %s's call", a.ID, decisionWord(approve), a.Principal)})
	return a, nil
}

func decisionWord(approve bool) string {
	if approve {
		return "approved"
	}
	return "denied"
}

// MemoryApprovals is the in-process ApprovalStore, the default.
type MemoryApprovals struct {
	mu    sync.Mutex
	byID  map[string]*Approval
	byKey map[string]string
}

// NewMemoryApprovals returns an empty in-memory approval store.
func NewMemoryApprovals() *MemoryApprovals {
	return &MemoryApprovals{byID: map[string]*Approval{}, byKey: map[string]string{}}
}

// copyOf returns a copy a caller may keep, so the store's own never
// changes under it.
func copyOf(a *Approval) *Approval {
	c := *a
	c.Approvals = slices.Clone(a.Approvals)
	if a.Denial != nil {
		d := *a.Denial
		c.Denial = &d
	}
	return &c
}

// Request implements [ApprovalStore].
func (m *MemoryApprovals) Request(_ context.Context, a *Approval) (*Approval, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if id, ok := m.byKey[a.Key]; ok {
		if answers, _ := m.byID[id].Answers(now); answers {
			return copyOf(m.byID[id]), nil
		}
	}
	// Old approvals are dropped now and then, so the store stays small.
	for id, old := range m.byID {
		if now.Sub(old.ExpiresAt) > time.Hour {
			delete(m.byID, id)
			if m.byKey[old.Key] == id {
				delete(m.byKey, old.Key)
			}
		}
	}
	m.byID[a.ID] = copyOf(a)
	m.byKey[a.Key] = a.ID
	return a, nil
}

// Get implements [ApprovalStore].
func (m *MemoryApprovals) Get(_ context.Context, id string) (*Approval, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.byID[id]
	if !ok {
		return nil, ErrApprovalUnknown
	}
	return copyOf(a), nil
}

// List implements [ApprovalStore].
func (m *MemoryApprovals) List(context.Context) ([]*Approval, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var out []*Approval
	for _, a := range m.byID {
		if a.State(now) == ApprovalPending {
			out = append(out, copyOf(a))
		}
	}
	slices.SortFunc(out, func(x, y *Approval) int { return x.CreatedAt.Compare(y.CreatedAt) })
	return out, nil
}

// Decide implements [ApprovalStore].
func (m *MemoryApprovals) Decide(_ context.Context, id string, v Vote, approve bool) (*Approval, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.byID[id]
	if !ok {
		return nil, ErrApprovalUnknown
	}
	if err := a.AddVote(v, approve, time.Now()); err != nil {
		return nil, err
	}
	return copyOf(a), nil
}

// Consume implements [ApprovalStore].
func (m *MemoryApprovals) Consume(_ context.Context, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.byID[id]
	return ok && a.Consume(time.Now()) == nil, nil
}

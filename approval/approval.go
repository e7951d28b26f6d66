package approval

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The states of an approval.
const (
	Pending  = "pending"
	Approved = "approved"
	Denied   = "denied"
	Consumed = "consumed"
	Expired  = "expired"
	// Lapsed is an approval that was approved but whose call did not run
	// before its deadline: the caller's next call asks anew.
	Lapsed = "lapsed"
)

// Verdict is what a vote says.
type Verdict string

// The verdicts of a vote.
const (
	Approve Verdict = "approve"
	Deny    Verdict = "deny"
)

// Past is the verdict as a past participle: "approved" or "denied".
func (v Verdict) Past() string {
	if v == Approve {
		return "approved"
	}
	return "denied"
}

// NewID returns a random, URL-safe id after prefix, such as "apr_".
func NewID(prefix string) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// Vote is one approver's decision on an approval.
type Vote struct {
	Principal string    `json:"principal"`
	Verdict   Verdict   `json:"verdict,omitempty"`
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
	// Rule names the rule that asked for approval; RuleDigest is the
	// digest of its definition, which a grant made from the approval is
	// bound to.
	Rule       string `json:"rule,omitempty"`
	RuleDigest string `json:"rule_digest,omitempty"`
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
	// ExpiresAt ends the wait for a decision.
	ExpiresAt time.Time `json:"expires_at"`
	// RunWithin is how long an approved call may wait to run, counted
	// from the vote that approved it; the approval's timeout when zero.
	RunWithin time.Duration `json:"run_within,omitempty"`
	// RunBy is set when the quorum is reached: the approved call must run
	// before it.
	RunBy     time.Time `json:"run_by,omitzero"`
	Approvals []Vote    `json:"approvals,omitempty"`
	Denial    *Vote     `json:"denial,omitempty"`
	// Consumed is set when the approved call ran; Reported when the
	// caller was told that it expired or lapsed, so the next call asks
	// anew.
	Consumed bool `json:"consumed,omitempty"`
	Reported bool `json:"reported,omitempty"`
}

// State returns the approval's state at now. An approved call runs only
// before its deadline: approval is checked against RunBy, never left open.
func (a *Approval) State(now time.Time) string {
	switch {
	case a.Consumed:
		return Consumed
	case a.Denial != nil:
		return Denied
	case len(a.Approvals) >= max(a.Quorum, 1):
		if !now.Before(a.runBy()) {
			return Lapsed
		}
		return Approved
	case !now.Before(a.ExpiresAt):
		return Expired
	}
	return Pending
}

// runBy is the approved call's deadline; approvals stored before RunBy
// was kept count from the last vote.
func (a *Approval) runBy() time.Time {
	if !a.RunBy.IsZero() {
		return a.RunBy
	}
	last := a.Approvals[len(a.Approvals)-1].At
	return last.Add(a.runWithin())
}

func (a *Approval) runWithin() time.Duration {
	if a.RunWithin > 0 {
		return a.RunWithin
	}
	return a.ExpiresAt.Sub(a.CreatedAt)
}

// Errors of deciding and using an approval.
var (
	ErrSelfApproval   = errors.New("the caller cannot approve their own call")
	ErrNotAnApprover  = errors.New("the rule does not name this approver")
	ErrAlreadyDecided = errors.New("the approval is no longer pending")
	ErrAlreadyVoted   = errors.New("this approver has already approved")
	ErrUnknown        = errors.New("no such approval")
	// ErrNotApproved is the error of consuming an approval that is not
	// (or no longer) approved, or using a grant that is not live.
	ErrNotApproved = errors.New("the approval is not approved")
	// ErrBadVerdict is the error of a vote that neither approves nor
	// denies.
	ErrBadVerdict = errors.New("a vote approves or denies")
)

// IsRuleError reports whether err is one of this package's errors: an
// answer of the rules of approvals and grants, which a store returns as
// it is, as against a failure of the store itself.
func IsRuleError(err error) bool {
	for _, rule := range []error{ErrSelfApproval, ErrNotAnApprover, ErrAlreadyDecided, ErrAlreadyVoted, ErrUnknown, ErrNotApproved, ErrBadVerdict, ErrGrantUnknown} {
		if errors.Is(err, rule) {
			return true
		}
	}
	return false
}

// AddVote records v on a pending approval: an approval by a person who has
// not approved yet, or the denial. The vote that reaches the quorum sets
// the deadline to run. Every store applies it to the stored approval under
// its own lock or transaction.
func (a *Approval) AddVote(v Vote, now time.Time) error {
	if v.Verdict != Approve && v.Verdict != Deny {
		return ErrBadVerdict
	}
	if a.State(now) != Pending {
		return ErrAlreadyDecided
	}
	if v.Verdict == Deny {
		a.Denial = &v
		return nil
	}
	if slices.ContainsFunc(a.Approvals, func(x Vote) bool { return x.Principal == v.Principal }) {
		return ErrAlreadyVoted
	}
	a.Approvals = append(a.Approvals, v)
	if len(a.Approvals) >= max(a.Quorum, 1) {
		a.RunBy = v.At.Add(a.runWithin())
	}
	return nil
}

// Consume marks an approved approval as used, or answers ErrNotApproved.
func (a *Approval) Consume(now time.Time) error {
	if a.State(now) != Approved {
		return ErrNotApproved
	}
	a.Consumed = true
	return nil
}

// Answers reports whether a request for the approval's binding is answered
// with the approval itself (it is pending or approved, denied within its
// timeout, or it expired or lapsed and its caller has not been told yet); changed says the
// approval was marked Reported and must be stored again. Every store's
// Request asks it, inside its transaction.
func (a *Approval) Answers(now time.Time) (answers, changed bool) {
	switch a.State(now) {
	case Pending, Approved:
		return true, false
	case Denied:
		// A denial answers the identical call until the approval's
		// timeout ends; after it, the caller may ask anew.
		return now.Before(a.ExpiresAt), false
	case Expired, Lapsed:
		if !a.Reported {
			a.Reported = true
			return true, true
		}
	}
	return false, false
}

// Deciders names who must approve a, for a message to its caller: "2 of
// alice, bob" under a quorum.
func (a *Approval) Deciders() string {
	who := strings.Join(a.Approvers, ", ")
	if who == "" {
		who = "nobody the policy names"
	}
	if a.Quorum > 1 {
		return fmt.Sprintf("%d of %s", a.Quorum, who)
	}
	return who
}

// Subject is what the rules of who may see it need to know of the
// approval.
func (a *Approval) Subject() Subject {
	s := Subject{Tenant: a.Tenant, Caller: a.Principal, Approvers: a.Approvers}
	for _, v := range a.Approvals {
		s.Deciders = append(s.Deciders, v.Principal)
	}
	if a.Denial != nil {
		s.Deciders = append(s.Deciders, a.Denial.Principal)
	}
	return s
}

// PasskeyChallenge is the WebAuthn challenge an approver signs to decide
// a: bound to its id, its binding key, a hash of its summary and
// arguments, and the verdict, so an assertion answers one decision on one
// approval and nothing else.
func (a *Approval) PasskeyChallenge(v Verdict) ([]byte, error) {
	args, err := json.Marshal(a.Args)
	if err != nil {
		return nil, fmt.Errorf("encoding the arguments of %s: %w", a.ID, err)
	}
	word := "denied"
	if v == Approve {
		word = "approved"
	}
	summary, argsDigest := sha256.Sum256([]byte(a.Summary)), sha256.Sum256(args)
	h := sha256.New()
	for _, s := range []string{"interlock approval v1", a.ID, a.Key, word} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	h.Write(summary[:])
	h.Write(argsDigest[:])
	return h.Sum(nil), nil
}

// Store keeps approvals; one live approval per binding key. [Memory]
// serves one process; packages redis and postgres serve several gateways.
type Store interface {
	// Request returns the binding's live approval (pending, approved or
	// denied), or stores a as a new one. An approval that expired or
	// lapsed is returned once more, marked Reported, so its caller learns
	// it never ran; the request after that stores a.
	Request(ctx context.Context, a *Approval) (*Approval, error)
	// Get returns an approval by id, or ErrUnknown.
	Get(ctx context.Context, id string) (*Approval, error)
	// List returns the approvals that are still pending.
	List(ctx context.Context) ([]*Approval, error)
	// Waiting returns the approvals that principal of tenant asked for
	// and that are still pending, oldest first: what a call under a cap
	// on waiting approvals counts. It reads that caller's approvals, not
	// every tenant's, so one tenant's many approvals do not slow another
	// tenant's calls.
	Waiting(ctx context.Context, tenant, principal string) ([]*Approval, error)
	// Decide adds v to the approval atomically ([Approval.AddVote]);
	// ErrAlreadyDecided when it is no longer pending.
	Decide(ctx context.Context, id string, v Vote) (*Approval, error)
	// Consume marks an approved approval as used and reports whether this
	// call did so: of any number of concurrent calls, one.
	Consume(ctx context.Context, id string) (bool, error)
}

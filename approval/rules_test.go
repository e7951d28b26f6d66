package approval_test

import (
	"errors"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/approval"
)

var (
	alice      = approval.Identity{Tenant: "acme", Principal: "alice"}
	otherAlice = approval.Identity{Tenant: "other", Principal: "alice"}
	bob        = approval.Identity{Tenant: "acme", Principal: "bob"}
	otherBob   = approval.Identity{Tenant: "other", Principal: "bob", Groups: []string{"finance"}}
	carol      = approval.Identity{Tenant: "acme", Principal: "carol"}
	fin        = approval.Identity{Tenant: "acme", Principal: "fin", Groups: []string{"finance"}}
	// aliceInFinance is the caller, in a group the rule names.
	aliceInFinance = approval.Identity{Tenant: "acme", Principal: "alice", Groups: []string{"finance"}}
	// noTenant is a principal of the same name with no tenant at all.
	noTenant = approval.Identity{Principal: "bob"}
)

func pendingApproval() *approval.Approval {
	now := time.Now()
	return &approval.Approval{ID: "apr_1", Key: "k", Tenant: "acme", Principal: "alice", Tool: "wipe", Rule: "wipes", RuleDigest: "d1",
		Approvers: []string{"bob", "group:finance"}, Quorum: 1, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
}

// TestRules is the matrix of the pure rules: identities (the caller, the
// same names in another tenant, named approvers, a group member, one the
// rule does not name) against what they may do.
func TestRules(t *testing.T) {
	a := pendingApproval()
	decided := pendingApproval()
	decided.Approvals = []approval.Vote{{Principal: "carol", Verdict: approval.Approve, At: time.Now()}}
	grant := &approval.StandingGrant{ID: "grt_1", Tool: "wipe", Tenant: "acme", Principal: "alice", Rule: "wipes", RuleDigest: "d1",
		Approvers: []string{"bob", "group:finance"}, GrantedBy: "fin", GranterGroups: []string{"finance"}, Uses: 5, ExpiresAt: time.Now().Add(time.Hour)}
	tests := []struct {
		name string
		who  approval.Identity
		// sees the approval and the grant; sees the decided approval
		// (carol decided it); decide is MayDecide's answer.
		sees, seesDecided bool
		decide            error
	}{
		{"the caller", alice, true, true, approval.ErrSelfApproval},
		{"the caller in a group the rule names", aliceInFinance, true, true, approval.ErrSelfApproval},
		{"the caller's name in another tenant", otherAlice, false, false, approval.ErrNotAnApprover},
		{"a named approver", bob, true, true, nil},
		{"a named approver's name in another tenant, in the named group", otherBob, false, false, approval.ErrNotAnApprover},
		{"a named approver's name with no tenant", noTenant, false, false, approval.ErrNotAnApprover},
		{"a group member", fin, true, true, nil},
		{"one the rule does not name", carol, false, true, approval.ErrNotAnApprover},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := approval.MaySee(tt.who, a.Subject()); got != tt.sees {
				t.Errorf("MaySee(pending) = %t, want %t", got, tt.sees)
			}
			if got := approval.MaySee(tt.who, decided.Subject()); got != tt.seesDecided {
				t.Errorf("MaySee(decided) = %t, want %t", got, tt.seesDecided)
			}
			if err := approval.MayDecide(tt.who, a); !errors.Is(err, tt.decide) || (tt.decide == nil) != (err == nil) {
				t.Errorf("MayDecide = %v, want %v", err, tt.decide)
			}
			seesGrant := approval.MaySee(tt.who, grant.Subject())
			if seesGrant != tt.sees {
				t.Errorf("MaySee(grant) = %t, want %t", seesGrant, tt.sees)
			}
			if err := approval.MayRevoke(tt.who, grant); (err == nil) != seesGrant {
				t.Errorf("MayRevoke = %v, yet MaySee(grant) = %t", err, seesGrant)
			}
		})
	}
}

// TestCovers: a grant covers a call only when the same rule, unchanged,
// decides it, for its own caller, within its limits, without a quorum or
// a passkey, and while its granter is still named.
func TestCovers(t *testing.T) {
	now := time.Now()
	base := func() *approval.StandingGrant {
		return &approval.StandingGrant{ID: "grt_1", Tool: "wipe", Tenant: "acme", Principal: "alice", Rule: "wipes", RuleDigest: "d1",
			Approvers: []string{"bob", "group:finance"}, GrantedBy: "fin", GranterGroups: []string{"finance"}, Uses: 5, ExpiresAt: now.Add(time.Hour)}
	}
	ruling := approval.Ruling{Rule: "wipes", RuleDigest: "d1", Approvers: []string{"bob", "group:finance"}, Quorum: 1}
	tests := []struct {
		name    string
		grant   func(*approval.StandingGrant)
		caller  approval.Identity
		tool    string
		ruling  func(*approval.Ruling)
		granter *approval.Identity
		covers  bool
	}{
		{name: "the same rule", covers: true},
		{name: "another caller", caller: bob},
		{name: "the caller's name in another tenant", caller: otherAlice},
		{name: "another tool", tool: "wipe_all"},
		{name: "another rule of the same name", ruling: func(r *approval.Ruling) { r.RuleDigest = "d2" }},
		{name: "another rule with the same digest", ruling: func(r *approval.Ruling) { r.Rule = "other" }},
		{name: "a rule with no digest", ruling: func(r *approval.Ruling) { r.RuleDigest = "" }, grant: func(g *approval.StandingGrant) { g.RuleDigest = "" }},
		{name: "a quorum of two", ruling: func(r *approval.Ruling) { r.Quorum = 2 }},
		{name: "a passkey", ruling: func(r *approval.Ruling) { r.RequirePasskey = true }},
		{name: "the granter left the group", granter: &approval.Identity{Tenant: "acme", Principal: "fin"}},
		{name: "the granter's name in another tenant", granter: &approval.Identity{Tenant: "other", Principal: "fin", Groups: []string{"finance"}}},
		{name: "the granter is the caller", grant: func(g *approval.StandingGrant) { g.GrantedBy = "alice" }, granter: &aliceInFinance},
		{name: "used up", grant: func(g *approval.StandingGrant) { g.Used = 5 }},
		{name: "revoked", grant: func(g *approval.StandingGrant) { g.Revoke("") }},
		{name: "voided", grant: func(g *approval.StandingGrant) { g.Revoke("its rule changed") }},
		{name: "expired", grant: func(g *approval.StandingGrant) { g.ExpiresAt = now }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := base()
			if tt.grant != nil {
				tt.grant(g)
			}
			r := ruling
			if tt.ruling != nil {
				tt.ruling(&r)
			}
			caller, tool, granter := alice, "wipe", g.Granter()
			if tt.caller.Principal != "" {
				caller = tt.caller
			}
			if tt.tool != "" {
				tool = tt.tool
			}
			if tt.granter != nil {
				granter = *tt.granter
			}
			if got := approval.Covers(g, caller, tool, r, granter, now); got != tt.covers {
				t.Errorf("Covers = %t, want %t", got, tt.covers)
			}
		})
	}
}

// TestStates: an approval moves through its states as votes come and time
// passes; an approved call has a deadline to run.
func TestStates(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	a := &approval.Approval{Quorum: 2, CreatedAt: t0, ExpiresAt: t0.Add(10 * time.Minute), RunWithin: 5 * time.Minute}
	steps := []struct {
		at    time.Duration
		vote  *approval.Vote
		err   error
		state string
	}{
		{at: 0, state: approval.Pending},
		{at: time.Minute, vote: &approval.Vote{Principal: "bob"}, err: approval.ErrBadVerdict, state: approval.Pending},
		{at: time.Minute, vote: &approval.Vote{Principal: "bob", Verdict: approval.Approve}, state: approval.Pending},
		{at: 2 * time.Minute, vote: &approval.Vote{Principal: "bob", Verdict: approval.Approve}, err: approval.ErrAlreadyVoted, state: approval.Pending},
		{at: 9 * time.Minute, vote: &approval.Vote{Principal: "carol", Verdict: approval.Approve}, state: approval.Approved},
		{at: 9 * time.Minute, vote: &approval.Vote{Principal: "dave", Verdict: approval.Deny}, err: approval.ErrAlreadyDecided, state: approval.Approved},
		// Past the wait for a decision, but inside the time to run.
		{at: 13 * time.Minute, state: approval.Approved},
		{at: 14 * time.Minute, state: approval.Lapsed},
	}
	for _, s := range steps {
		now := t0.Add(s.at)
		if s.vote != nil {
			v := *s.vote
			v.At = now
			if err := a.AddVote(v, now); !errors.Is(err, s.err) || (s.err == nil) != (err == nil) {
				t.Errorf("at %s: vote %+v: %v, want %v", s.at, v, err, s.err)
			}
		}
		if got := a.State(now); got != s.state {
			t.Errorf("at %s: %s, want %s", s.at, got, s.state)
		}
	}
	if err := a.Consume(t0.Add(14 * time.Minute)); !errors.Is(err, approval.ErrNotApproved) {
		t.Errorf("consuming a lapsed approval: %v", err)
	}
	if answers, changed := a.Answers(t0.Add(14 * time.Minute)); !answers || !changed {
		t.Errorf("a lapsed approval answers once: %t %t", answers, changed)
	}
	if answers, _ := a.Answers(t0.Add(14 * time.Minute)); answers {
		t.Error("a lapsed approval answered twice")
	}
}

// TestDenialHolds: a denial answers the identical call until the
// approval's timeout ends, and no longer.
func TestDenialHolds(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	a := &approval.Approval{Quorum: 1, CreatedAt: t0, ExpiresAt: t0.Add(10 * time.Minute)}
	if err := a.AddVote(approval.Vote{Principal: "bob", Verdict: approval.Deny, At: t0.Add(time.Minute)}, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		at      time.Duration
		answers bool
	}{{2 * time.Minute, true}, {10*time.Minute - time.Nanosecond, true}, {10 * time.Minute, false}, {time.Hour, false}} {
		if got, changed := a.Answers(t0.Add(tt.at)); got != tt.answers || changed {
			t.Errorf("at %s: answers %t (changed %t), want %t", tt.at, got, changed, tt.answers)
		}
	}
}

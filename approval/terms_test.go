package approval

import (
	"strings"
	"testing"
	"time"
)

func TestTermsRefusal(t *testing.T) {
	tests := []struct {
		lifetime time.Duration
		uses     int
		want     string // a part of the refusal; "" when the terms stand
	}{
		{time.Hour, 1, ""},
		{MaxGrantLifetime, MaxGrantUses, ""},
		{0, 1, "at most 24h0m0s, not 0s"},
		{MaxGrantLifetime + time.Second, 1, "not 24h0m1s"},
		{time.Hour, 0, "from 1 to 10000 uses, not 0"},
		{time.Hour, MaxGrantUses + 1, "not 10001"},
	}
	for _, tt := range tests {
		t.Run(tt.lifetime.String(), func(t *testing.T) {
			got := TermsRefusal(tt.lifetime, tt.uses)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("TermsRefusal(%s, %d) = %q, want %q", tt.lifetime, tt.uses, got, tt.want)
			}
		})
	}
}

func TestParseLifetime(t *testing.T) {
	if d, err := ParseLifetime("2h"); err != nil || d != 2*time.Hour {
		t.Errorf(`ParseLifetime("2h") = %s, %v`, d, err)
	}
	if _, err := ParseLifetime("two hours"); err == nil || !strings.Contains(err.Error(), `"two hours" is not a duration such as 2h`) {
		t.Errorf(`ParseLifetime("two hours") error = %v`, err)
	}
}

func TestGrantRefusal(t *testing.T) {
	tests := []struct {
		name string
		r    Ruling
		want string
	}{
		{"one approver", Ruling{Rule: "r", RuleDigest: "d", Quorum: 1}, ""},
		{"quorum", Ruling{Rule: "r", RuleDigest: "d", Quorum: 2}, "asks 2 approvers"},
		{"passkey", Ruling{Rule: "r", RuleDigest: "d", RequirePasskey: true}, "passkey"},
		{"no rule", Ruling{}, "names no rule"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.r.GrantRefusal()
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("GrantRefusal = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDeciders(t *testing.T) {
	tests := []struct {
		a    Approval
		want string
	}{
		{Approval{Approvers: []string{"alice"}, Quorum: 1}, "alice"},
		{Approval{Approvers: []string{"alice", "bob"}, Quorum: 2}, "2 of alice, bob"},
		{Approval{Quorum: 1}, "nobody the policy names"},
	}
	for _, tt := range tests {
		if got := tt.a.Deciders(); got != tt.want {
			t.Errorf("Deciders = %q, want %q", got, tt.want)
		}
	}
	if Approve.Past() != "approved" || Deny.Past() != "denied" {
		t.Error("Past of a verdict is wrong")
	}
	if id := NewID("grt_"); !strings.HasPrefix(id, "grt_") || len(id) != 4+16 || id == NewID("grt_") {
		t.Errorf("NewID = %q, want a fresh grt_ id of 16 characters", id)
	}
}

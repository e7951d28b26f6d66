package audit

import "testing"

// BenchmarkLink is the cost of hashing and encoding one audit record
// of a call, the part of an append that is not the store's.
func BenchmarkLink(b *testing.B) {
	prev := ""
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r := &Record{Event: "call", Tenant: "acme", Principal: "alice", Client: "claude-code/2.1", Session: "s1",
			Tool: "get_customer", Upstream: "demo", Mode: "allow", Args: map[string]any{"id": "acct_9931"},
			ArgsDigest: "3f1c0a", Decision: DecisionAllowed, Outcome: OutcomeOK, LatencyMS: 0.42}
		if _, err := r.Link(int64(i+1), prev); err != nil {
			b.Fatal(err)
		}
		prev = r.Hash
	}
}

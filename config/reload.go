package config

import "reflect"

// KeepRunning readies f, just loaded, to replace running in a gateway that
// keeps serving: the sections that only take effect when the gateway
// starts (upstreams, store, http, audit, auth.oauth) are taken from
// running, and so is all of auth when f would switch authentication on or
// off, since that changes who may reach the gateway at all. Everything else in f (rules, default_mode,
// redact, max_argument_bytes, the API keys themselves, notify) is f's own.
// It returns the names of the sections that differ from running and so
// were kept, in file order.
func (f *File) KeepRunning(running *File) []string {
	var kept []string
	if !sameUpstreams(f.Upstreams, running.Upstreams) {
		kept = append(kept, "upstreams")
	}
	f.Upstreams = running.Upstreams
	switch {
	case f.Auth.Configured() != running.Auth.Configured():
		kept = append(kept, "auth")
		f.Auth = running.Auth
	case !reflect.DeepEqual(f.Auth.OAuth, running.Auth.OAuth):
		// The issuer's validator and the console's sign-in are made at
		// start; the keys beside them still change.
		kept = append(kept, "auth.oauth")
		f.Auth.OAuth = running.Auth.OAuth
	}
	if f.Store != running.Store {
		kept = append(kept, "store")
	}
	f.Store = running.Store
	if !reflect.DeepEqual(withoutLines(f.HTTP), withoutLines(running.HTTP)) {
		kept = append(kept, "http")
	}
	f.HTTP = running.HTTP
	if !reflect.DeepEqual(auditWithoutLines(f.Audit), auditWithoutLines(running.Audit)) {
		kept = append(kept, "audit")
	}
	f.Audit = running.Audit
	return kept
}

// sameUpstreams compares two upstream lists by what they configure, not
// where in the file they stand.
func sameUpstreams(a, b []*Upstream) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := *a[i], *b[i]
		x.Line, x.lines, y.Line, y.lines = 0, nil, 0, nil
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

// withoutLines is h as configured: its parsed values, without the raw
// text and the line numbers they came from.
func withoutLines(h HTTP) HTTP {
	h.durations, h.lines, h.line = nil, nil, 0
	return h
}

func auditWithoutLines(a Audit) Audit {
	if a.Checkpoint != nil {
		c := *a.Checkpoint
		c.Line = 0
		a.Checkpoint = &c
	}
	return a
}

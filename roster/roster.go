// Package roster is who the interlock gateways sharing one store are. Each
// gateway announces itself in the store it keeps its state in (the data
// directory's state file, Redis or PostgreSQL): its version, the digest of
// the configuration it runs and its console, if it serves one. A gateway
// on stdio finds there a console to send approvers to, and an operator
// sees there, through interlock status, /readyz and the metrics, the
// replicas whose versions or configurations drifted apart.
//
// Announcements are renewed now and then and removed as a gateway stops;
// one that was killed ages out (see [Store.Gateways]).
package roster

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Gateway is one interlock process that shares the store: what it runs
// and where, if anywhere, its console is.
type Gateway struct {
	ID      string `json:"id"`
	Version string `json:"version"`
	// ConsoleURL is the base URL of its console (such as
	// http://127.0.0.1:8740), empty for a gateway that serves none (a
	// `serve --stdio`).
	ConsoleURL string `json:"console_url,omitempty"`
	// ConfigDigest names the configuration it runs (its file's SHA-256,
	// and its shadow policy's), as its reloads log it; empty from a
	// version that did not record it.
	ConfigDigest string `json:"config_digest,omitempty"`
	// Authenticates is set when its callers and approvers authenticate
	// (API keys or an OAuth issuer): its console then signs nobody in by
	// a one-time link.
	Authenticates bool `json:"authenticates,omitempty"`
	// Warnings are what its configuration does not do as written (a rule
	// that matches no tool, an approver no key can be), as its banner,
	// its log and /readyz say them; renewed with every announcement.
	Warnings []string  `json:"warnings,omitempty"`
	Since    time.Time `json:"since"`
	Seen     time.Time `json:"seen"`
}

// SeenAt is g as announced at now: seen then, and first announced then
// unless it says when.
func (g Gateway) SeenAt(now time.Time) Gateway {
	if g.Since.IsZero() {
		g.Since = now
	}
	g.Seen = now
	return g
}

// Store keeps the announcements of the gateways that share it.
type Store interface {
	// Announce records that g runs now, or that it still does. The time
	// it was first announced (Since) is kept; Seen becomes now.
	// Announcements not renewed for a day are dropped.
	Announce(ctx context.Context, g Gateway) error
	// Depart removes the announcement of the gateway id, as a gateway
	// stopping does.
	Depart(ctx context.Context, id string) error
	// Gateways returns the gateways seen within the last within, the most
	// recently seen first.
	Gateways(ctx context.Context, within time.Duration) ([]Gateway, error)
}

// Forget is how long an announcement that was not renewed is kept.
const Forget = 24 * time.Hour

// ConsoleURL returns the console base URL of the gateway in gws seen most
// recently that serves one, "" when none does.
func ConsoleURL(gws []Gateway) string {
	for _, g := range gws {
		if g.ConsoleURL != "" {
			return g.ConsoleURL
		}
	}
	return ""
}

// Drift says how gws differ: each version, and each configuration digest,
// with the gateways that run it. It is "" when they all run one version
// of one configuration.
func Drift(gws []Gateway) string {
	var parts []string
	if v := differing(gws, func(g Gateway) string { return g.Version }); v != "" {
		parts = append(parts, "versions differ: "+v)
	}
	if d := differing(gws, func(g Gateway) string { return ShortDigest(g.ConfigDigest) }); d != "" {
		parts = append(parts, "config digests differ: "+d)
	}
	return strings.Join(parts, "; ")
}

// differing lists each value of gws (as of says) with the gateways that
// have it, or returns "" when they all have one.
func differing(gws []Gateway, of func(Gateway) string) string {
	var values []string
	ids := map[string][]string{}
	for _, g := range gws {
		v := of(g)
		if _, ok := ids[v]; !ok {
			values = append(values, v)
		}
		ids[v] = append(ids[v], g.ID)
	}
	if len(values) < 2 {
		return ""
	}
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = fmt.Sprintf("%s (%s)", v, strings.Join(ids[v], ", "))
	}
	return strings.Join(parts, ", ")
}

// ShortDigest is a configuration digest cut to 12 characters a part (a
// digest may join the file's and the shadow policy's with "+"), or
// "unknown" for a gateway that did not record one.
func ShortDigest(d string) string {
	if d == "" {
		return "unknown"
	}
	parts := strings.Split(d, "+")
	for i, p := range parts {
		if len(p) > 12 {
			parts[i] = p[:12]
		}
	}
	return strings.Join(parts, "+")
}

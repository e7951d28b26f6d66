// Package metrics exposes what interlock's gate decides in the Prometheus
// text format: calls by tool, mode, decision and outcome, the confirmation
// funnel, refusals by budget, and latency histograms for the gate and for
// each upstream.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/roster"
)

// Metrics is an [interlock.Meter] that keeps Prometheus metrics in a
// registry of its own.
type Metrics struct {
	registry      *prometheus.Registry
	calls         *prometheus.CounterVec
	confirmations *prometheus.CounterVec
	gate          *prometheus.HistogramVec
	upstream      *prometheus.HistogramVec
	upstreamUp    *prometheus.GaugeVec
	breakerOpen   *prometheus.GaugeVec
	events        *prometheus.CounterVec
	budgets       *prometheus.CounterVec
	gateways      *prometheus.GaugeVec
}

var _ interlock.Meter = (*Metrics)(nil)

// gateBuckets span the gate's own cost, from a microsecond to the time a
// human takes to answer a form (the gate's latency includes waiting for
// one on earlier protocols).
var gateBuckets = []float64{1e-6, 5e-6, 25e-6, 100e-6, 500e-6, 2.5e-3, 10e-3, 50e-3, 0.25, 1, 5, 30, 120}

// New returns metrics registered with a new registry, with the Go runtime
// and process collectors beside them.
func New() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "interlock_calls_total",
			Help: "Tool calls by tool, mode, decision and outcome (ok or the error code).",
		}, []string{"tool", "mode", "decision", "outcome"}),
		confirmations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "interlock_confirmations_total",
			Help: "The confirmation funnel: calls asked, confirmed (by key), declined, cancelled and expired.",
		}, []string{"stage", "by"}),
		gate: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "interlock_gate_seconds",
			Help:    "Time a call spends in the gate, not counting the tool's own run.",
			Buckets: gateBuckets,
		}, []string{"mode"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "interlock_upstream_seconds",
			Help:    "Time the tool behind the gate took to answer, by upstream.",
			Buckets: prometheus.ExponentialBuckets(1e-4, 4, 12),
		}, []string{"upstream"}),
		upstreamUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "interlock_upstream_up",
			Help: "1 when the gateway holds a session with the upstream, 0 when not.",
		}, []string{"upstream"}),
		breakerOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "interlock_breaker_state",
			Help: "Each tenant's circuit breaker for each upstream: 0 closed, 1 half-open, 2 open.",
		}, []string{"upstream", "tenant"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "interlock_events_total",
			Help: "Events around the gate: refused API keys, upstream restarts, hints an upstream tried to loosen.",
		}, []string{"event"}),
		budgets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "interlock_budget_refusals_total",
			Help: "Gated calls refused because a budget was spent, by budget.",
		}, []string{"budget"}),
		gateways: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "interlock_gateways",
			Help: "The gateways that share this gateway's store, by version and configuration digest (cut to 12 characters): more than one series means they drifted apart.",
		}, []string{"version", "config"}),
	}
	m.registry.MustRegister(m.calls, m.confirmations, m.gate, m.upstream, m.upstreamUp, m.breakerOpen, m.events, m.budgets, m.gateways,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Gateways sets the gateways that share the store, as this gateway last
// read them.
func (m *Metrics) Gateways(gws []roster.Gateway) {
	m.gateways.Reset()
	for _, g := range gws {
		m.gateways.WithLabelValues(g.Version, roster.ShortDigest(g.ConfigDigest)).Inc()
	}
}

// ObserveCall implements [interlock.Meter].
func (m *Metrics) ObserveCall(s interlock.CallStats) {
	m.calls.WithLabelValues(s.Tool, s.Mode, s.Decision, s.Outcome).Inc()
	if s.Budget != "" {
		m.budgets.WithLabelValues(s.Budget).Inc()
	}
	switch s.Decision {
	case audit.DecisionAsked, audit.DecisionDeclined, audit.DecisionCancelled, audit.DecisionExpired:
		m.confirmations.WithLabelValues(s.Decision, "").Inc()
	case audit.DecisionConfirmed:
		m.confirmations.WithLabelValues(s.Decision, s.ConfirmedBy).Inc()
	}
	m.gate.WithLabelValues(s.Mode).Observe((s.Took - s.Ran).Seconds())
	if s.Ran > 0 {
		upstream := s.Upstream
		if upstream == "" {
			upstream = "local"
		}
		m.upstream.WithLabelValues(upstream).Observe(s.Ran.Seconds())
	}
}

// Event counts an event around the gate.
func (m *Metrics) Event(name string) { m.events.WithLabelValues(name).Inc() }

// UpstreamUp records whether the gateway holds a session with an upstream.
func (m *Metrics) UpstreamUp(upstream string, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	m.upstreamUp.WithLabelValues(upstream).Set(v)
}

// Breaker records the state of a tenant's circuit breaker for an
// upstream: closed, half-open or open.
func (m *Metrics) Breaker(upstream, tenant, state string) {
	v := 0.0
	switch state {
	case "half-open":
		v = 1
	case "open":
		v = 2
	}
	m.breakerOpen.WithLabelValues(upstream, tenant).Set(v)
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

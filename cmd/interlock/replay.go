package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/audit"
	"github.com/interlock-mcp/interlock/config"
	"github.com/interlock-mcp/interlock/policy"
)

// changesFound is replay's exit status when a decision would change, as
// `terraform plan -detailed-exitcode` reports a plan with changes.
const changesFound = 2

// replay decides the calls recorded in the audit log again with a
// candidate policy and prints every decision that would change: exit 0
// when none would, 2 when one would or cannot be told, 1 on an error.
func replay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags, err := replayFlagsOf(args, stderr)
	if err != nil {
		return err
	}
	from, err := parseSince(flags.since)
	if err != nil {
		return err
	}
	next, err := config.Load(flags.candidate)
	if err != nil {
		var errs policy.LoadErrors
		if errors.As(err, &errs) {
			return report(stderr, errs)
		}
		return err
	}
	f, store, where, err := openAuditToRead(ctx, flags.configFile, flags.data)
	if err != nil {
		return err
	}
	defer store.Close()
	rp := &replaying{next: next, offered: map[string]policy.OfferedTool{}}
	if flags.connect {
		if rp.offered, err = advertisedTools(ctx, f); err != nil {
			return err
		}
	}

	fmt.Fprintf(stdout, "replaying the calls recorded in %s against %s\n", where, next.Policy.Path)
	for r, err := range store.Records(ctx, 1) {
		if err != nil {
			return err
		}
		// Each call through the gate ends with one record that has its
		// outcome; a call refused before any decision has no mode.
		if r.Event != "call" || r.Outcome == "" || r.Mode == "" || r.Time.Before(from) {
			continue
		}
		rp.decideAgain(ctx, r, stdout)
	}
	return rp.summarize(stdout)
}

// replayFlags are replay's command line.
type replayFlags struct {
	candidate, configFile, data, since string
	connect                            bool
}

// replayFlagsOf reads replay's command line, which must name the
// candidate policy.
func replayFlagsOf(args []string, stderr io.Writer) (replayFlags, error) {
	var o replayFlags
	fs := newFlags("replay", stderr)
	fs.StringVar(&o.candidate, "policy", "", "the candidate configuration or policy `file` to decide with (required)")
	fs.StringVar(&o.configFile, "config", "", "configuration `file` whose audit section names the log (default: the built-in config)")
	fs.StringVar(&o.data, "data", ".interlock", "data `directory` holding audit.db")
	fs.StringVar(&o.since, "since", "", "only calls recorded at or after this `time` (RFC 3339, such as 2026-11-23T00:00:00Z)")
	fs.BoolVar(&o.connect, "connect", false, "take the hints of calls recorded without them from what the config's upstreams advertise")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if o.candidate == "" {
		fmt.Fprintln(stderr, "interlock replay: give the candidate policy: interlock replay --policy NEW.yaml")
		return o, errUsage
	}
	return o, nil
}

// replaying is one run of replay: the candidate policy, the hints the
// upstreams advertise for records written without them, and how many
// calls were replayed, would change, cannot be told and had no hints.
type replaying struct {
	next    *config.File
	offered map[string]policy.OfferedTool

	calls, changed, unfaithful, hintless int
}

// decideAgain decides a recorded call with the candidate policy, and
// prints it when the decision changes or cannot be told.
func (rp *replaying) decideAgain(ctx context.Context, r *audit.Record, stdout io.Writer) {
	rp.calls++
	hints, known := recordedHints(r, rp.offered)
	if !known {
		rp.hintless++
	}
	c := &interlock.Call{Tool: r.Tool, Upstream: r.Upstream, Hints: hints,
		Identity: interlock.Identity{Principal: r.Principal, Tenant: r.Tenant}, Args: r.Args}
	if c.Args == nil {
		c.Args = map[string]any{}
	}
	v := rp.next.Policy.Judge(ctx, c)
	guessed := rp.next.Policy.Unfaithful(c)
	// Records written before every record named its rule leave the
	// default's name out.
	differs := cmp.Or(v.Rule, interlock.DefaultRule) != cmp.Or(r.Rule, interlock.DefaultRule) || string(v.Mode) != r.Mode
	if !differs && len(guessed) == 0 {
		return
	}
	// ~ marks a decision that changes, ? one that cannot be told.
	mark, note := "~", ""
	if differs {
		rp.changed++
	}
	if len(guessed) > 0 {
		rp.unfaithful++
		mark, note = "?", fmt.Sprintf(" (cannot be told: %s reads an argument the log holds redacted)", ruleList(guessed))
	}
	fmt.Fprintf(stdout, "%s %s (%s, record %d, %s): %s -> %s%s\n", mark, r.Tool, who(r), r.Seq,
		r.Time.UTC().Format("2006-01-02T15:04:05Z"), decisionOf(r.Rule, r.Mode), decisionOf(cmp.Or(v.Rule, interlock.DefaultRule), string(v.Mode)), note)
}

// summarize prints the tally, and fails with exit status 2 when a
// decision would change or cannot be told.
func (rp *replaying) summarize(stdout io.Writer) error {
	fmt.Fprintf(stdout, "%d of %d calls would be decided differently", rp.changed, rp.calls)
	if rp.unfaithful > 0 {
		fmt.Fprintf(stdout, "; %d cannot be replayed faithfully", rp.unfaithful)
	}
	if rp.hintless > 0 {
		fmt.Fprintf(stdout, "; %d recorded without hints were decided for an unannotated tool (destructive, open-world)", rp.hintless)
	}
	fmt.Fprintln(stdout)
	if rp.changed > 0 || rp.unfaithful > 0 {
		return &exitStatus{changesFound, fmt.Errorf("%d decisions would change, %d cannot be told", rp.changed, rp.unfaithful)}
	}
	return nil
}

// recordedHints returns the hints a recorded call was decided on; for a
// record that predates them, what the upstream advertises, if known, or
// none (unannotated). known is false in that last case.
func recordedHints(r *audit.Record, offered map[string]policy.OfferedTool) (h interlock.Hints, known bool) {
	if r.Hints != nil {
		return interlock.Hints(*r.Hints), true
	}
	if t, ok := offered[r.Tool]; ok && t.Upstream == r.Upstream {
		return t.Hints, true
	}
	return interlock.HintsOf(nil), false
}

// decisionOf shows a rule and mode as `token (rule "refunds")`.
func decisionOf(rule, mode string) string {
	if rule == "" || rule == interlock.DefaultRule {
		return mode + " (default)"
	}
	return fmt.Sprintf("%s (rule %q)", mode, rule)
}

// who names a record's caller as tenant/principal.
func who(r *audit.Record) string {
	if r.Tenant == "" {
		return r.Principal
	}
	return r.Tenant + "/" + r.Principal
}

func ruleList(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = fmt.Sprintf("rule %q", n)
	}
	return strings.Join(quoted, ", ")
}

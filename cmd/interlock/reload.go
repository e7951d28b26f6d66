package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/interlock-mcp/interlock/gateway"
	"github.com/interlock-mcp/interlock/notify"
	"github.com/interlock-mcp/interlock/policy"
)

// watchInterval is how often --watch looks at the configuration file.
// Polling, not file-system events: editors and configuration managers
// replace a file by renaming a new one over it, which a watch on the old
// file would miss, and a stat a second costs nothing.
const watchInterval = time.Second

// reloader loads the configuration file again into a running gateway: on
// SIGHUP, and with --watch whenever the file changes.
type reloader struct {
	name, dataDir string
	gw            *gateway.Gateway
	notifier      *notify.Notifier
	log           *slog.Logger
	// digest is the SHA-256 of the file in force, so that --watch reloads
	// only a file whose contents changed.
	digest string
}

// run reloads on every signal on hup and, when watch is set, on every
// change of the file, until ctx ends.
func (r *reloader) run(ctx context.Context, hup <-chan os.Signal, watch bool) {
	var tick <-chan time.Time
	var last os.FileInfo
	if watch {
		t := time.NewTicker(watchInterval)
		defer t.Stop()
		tick = t.C
		last, _ = os.Stat(r.name)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.log.Info("SIGHUP: reloading the configuration", "file", r.shownName())
			r.reload(ctx, true)
		case <-tick:
			// A file being replaced may be missing for a moment: the
			// next tick sees the new one.
			now, err := os.Stat(r.name)
			if err != nil || (last != nil && os.SameFile(last, now) && now.ModTime().Equal(last.ModTime()) && now.Size() == last.Size()) {
				continue
			}
			last = now
			r.reload(ctx, false)
		}
	}
}

// reload reads the file and, when it is sound, makes it the gateway's
// configuration; a file with problems leaves the running one in force and
// logs each problem as `interlock check` prints it. Unless always is set,
// a file whose contents have not changed is left alone.
func (r *reloader) reload(ctx context.Context, always bool) {
	f, digest, err := readConfig(r.name, r.dataDir)
	var problems policy.LoadErrors
	switch {
	case errors.As(err, &problems):
		for _, p := range problems {
			r.log.Error("configuration problem", "problem", p.Error())
		}
		r.log.Error("configuration refused; the running one stays in force", "file", r.shownName(), "problems", len(problems))
		r.gw.RejectConfig(ctx, r.shownName(), len(problems))
		return
	case err != nil:
		r.log.Error("configuration not reloaded; the running one stays in force", "error", err)
		r.gw.RejectConfig(ctx, r.shownName(), 1)
		return
	}
	if digest == r.digest && !always {
		return
	}
	r.digest = digest
	if err := r.gw.Reload(ctx, f, digest); err != nil {
		r.log.Warn("configuration reloaded, but an upstream's tools could not be listed again", "error", err)
	}
	if r.notifier != nil {
		r.notifier.SetHooks(webhooks(f))
	}
}

func (r *reloader) shownName() string {
	if r.name == "" {
		return builtinName
	}
	return r.name
}

// webhooks are the notify entries of f, as the notifier takes them.
func webhooks(f *policy.File) []notify.Webhook {
	hooks := make([]notify.Webhook, len(f.Notify))
	for i, h := range f.Notify {
		hooks[i] = notify.Webhook{URL: h.URL, Format: h.Format}
	}
	return hooks
}

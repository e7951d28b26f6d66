package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/interlock-mcp/interlock/config"
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
	// digest is the version of the configuration in force (see
	// versionOf), so that --watch reloads only when contents changed.
	digest string
	// shadow is the shadow policy's file of the configuration in force,
	// which --watch looks at too; empty when it names none.
	shadow string
	// reloaded, when set, is given the digest of each configuration put
	// in force, the latest only when it was not taken yet.
	reloaded chan string
}

// versionOf names the version of a configuration in force: the SHA-256
// of its file, and of its shadow policy's file when it names one, so that
// a change of either is a change. It also returns the shadow policy's
// file, or "".
func versionOf(f *config.File) (string, string) {
	if f.ShadowPolicy == nil {
		return f.Digest, ""
	}
	return f.Digest + "+" + f.ShadowPolicy.Digest, f.ShadowPolicy.Policy.Path
}

// unchanged reports whether a file --watch looked at before (was) is still
// the same one (now): not replaced, rewritten or resized.
func unchanged(was, now os.FileInfo) bool {
	if was == nil || now == nil {
		return was == nil && now == nil
	}
	return os.SameFile(was, now) && now.ModTime().Equal(was.ModTime()) && now.Size() == was.Size()
}

// statOf is name's file information, nil when name is empty or missing.
func statOf(name string) os.FileInfo {
	if name == "" {
		return nil
	}
	fi, err := os.Stat(name)
	if err != nil {
		return nil
	}
	return fi
}

// run reloads on every signal on hup and, when watch is set, on every
// change of the file, until ctx ends.
func (r *reloader) run(ctx context.Context, hup <-chan os.Signal, watch bool) {
	var tick <-chan time.Time
	var lastConfig, lastShadow os.FileInfo
	if watch {
		t := time.NewTicker(watchInterval)
		defer t.Stop()
		tick = t.C
		lastConfig, lastShadow = statOf(r.name), statOf(r.shadow)
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
			config, shadow := statOf(r.name), statOf(r.shadow)
			if config == nil || (r.shadow != "" && shadow == nil) || (unchanged(lastConfig, config) && unchanged(lastShadow, shadow)) {
				continue
			}
			lastConfig, lastShadow = config, shadow
			r.reload(ctx, false)
		}
	}
}

// reload reads the file and, when it is sound, makes it the gateway's
// configuration; a file with problems leaves the running one in force and
// logs each problem as `interlock check` prints it. Unless always is set,
// a file whose contents have not changed is left alone.
func (r *reloader) reload(ctx context.Context, always bool) {
	f, err := loadConfig(r.name, r.dataDir)
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
	version, shadow := versionOf(f)
	if version == r.digest && !always {
		return
	}
	r.digest, r.shadow = version, shadow
	if err := r.gw.Reload(ctx, f, f.Digest); err != nil {
		r.log.Warn("configuration reloaded, but an upstream's tools could not be listed again", "error", err)
	}
	if r.reloaded != nil {
		// The only sender: once an earlier digest not taken is dropped,
		// the send cannot block.
		select {
		case <-r.reloaded:
		default:
		}
		r.reloaded <- version
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
func webhooks(f *config.File) []notify.Webhook {
	hooks := make([]notify.Webhook, len(f.Notify))
	for i, h := range f.Notify {
		hooks[i] = notify.Webhook{URL: h.URL, Format: h.Format}
	}
	return hooks
}

package config

import (
	"fmt"
	"net/url"
)

// The notify section: the webhooks told of every new pending approval.

// Webhook is a place told of every new pending approval.
type Webhook struct {
	// URL receives a POST; ${VAR} is read from the gateway's environment
	// at load (Slack and Mattermost put their token in the URL).
	URL string `yaml:"url"`
	// Format is json (the default), slack or mattermost.
	Format string `yaml:"format"`
}

// checkNotify checks the webhooks and expands ${VAR} in their URLs.
func checkNotify(f *File, keyLine lines, expand expander, add func(int, string, ...any)) {
	for i, h := range f.Notify {
		at := keyLine.At(fmt.Sprintf("notify[%d].url", i), keyLine.At("notify", 0))
		if h == nil {
			add(keyLine.At("notify", 0), "notify has an empty entry: give url and format")
			continue
		}
		h.URL = expand(at, "notify url", h.URL)
		if u, err := url.Parse(h.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add(at, "notify url must be an http:// or https:// URL")
		}
		switch h.Format {
		case "", "json", "slack", "mattermost":
		default:
			add(at, "notify format %q: use json, slack or mattermost", h.Format)
		}
	}
}

package oauth

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Introspection defaults.
const (
	// DefaultIntrospectionCache is how long an answer of the introspection
	// endpoint is kept unless the config says otherwise.
	DefaultIntrospectionCache = 30 * time.Second
	// DefaultIntrospectionEntries bounds the answers kept.
	DefaultIntrospectionEntries = 10_000
)

// ErrIntrospectionFailed is wrapped by the refusal of a token whose
// signature and claims verified but which the introspection endpoint did
// not confirm, because it could not be reached or gave no answer that
// says whether the token is active. It does not wrap ErrInvalidToken: the
// token may well be good, and the caller should try it again rather than
// sign in anew.
var ErrIntrospectionFailed = errors.New("the issuer's introspection endpoint did not confirm the token")

// Introspection asks the issuer whether a token is still active (RFC
// 7662), so that a revoked token stops working within Cache rather than
// at its expiry.
type Introspection struct {
	// URL is the introspection endpoint; the introspection_endpoint of the
	// issuer's discovery document when empty.
	URL string
	// ClientID and ClientSecret authenticate the gateway to the endpoint
	// with HTTP Basic (client_secret_basic).
	ClientID     string
	ClientSecret string
	// Cache is how long an answer is kept for its token, and never longer
	// than the token has left; DefaultIntrospectionCache when zero.
	Cache time.Duration
	// MaxEntries bounds the answers kept, the oldest going first;
	// DefaultIntrospectionEntries when zero.
	MaxEntries int
}

// introspector asks the endpoint and keeps its answers.
type introspector struct {
	cfg     Introspection
	client  *http.Client
	now     func() time.Time
	url     func(context.Context) (string, error)
	answers *answers
}

// check refuses token unless the endpoint says, or said less than the
// cache time ago, that it is active.
func (in *introspector) check(ctx context.Context, token string, expiry time.Time) error {
	key := sha256.Sum256([]byte(token))
	now := in.now()
	active, known := in.answers.get(key, now)
	if !known {
		var err error
		if active, err = in.ask(ctx, token); err != nil {
			return fmt.Errorf("%w: %w", ErrIntrospectionFailed, err)
		}
		until := now.Add(in.cfg.Cache)
		if expiry.Before(until) {
			until = expiry
		}
		if until.After(now) {
			in.answers.put(key, active, until)
		}
	}
	if !active {
		return fmt.Errorf("%w: the issuer says the token is not active (revoked)", ErrInvalidToken)
	}
	return nil
}

// ask posts token to the introspection endpoint and returns its answer.
func (in *introspector) ask(ctx context.Context, token string) (bool, error) {
	endpoint, err := in.url(ctx)
	if err != nil {
		return false, err
	}
	form := url.Values{"token": {token}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return false, fmt.Errorf("asking %s: %w", endpoint, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	// RFC 6749 section 2.3.1: the client id and secret are form-encoded
	// before they go into the Basic credentials.
	req.SetBasicAuth(url.QueryEscape(in.cfg.ClientID), url.QueryEscape(in.cfg.ClientSecret))
	resp, err := in.client.Do(req)
	if err != nil {
		// The client's error names the URL, never the form it sent.
		return false, fmt.Errorf("asking the introspection endpoint: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return false, fmt.Errorf("reading the answer of %s: %w", endpoint, err)
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s answered %s (a 401 means client_id or client_secret is wrong)", endpoint, resp.Status)
	}
	var answer struct {
		Active *bool `json:"active"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return false, fmt.Errorf("the answer of %s: %w", endpoint, err)
	}
	if answer.Active == nil {
		return false, fmt.Errorf("the answer of %s has no boolean active", endpoint)
	}
	return *answer.Active, nil
}

// introspectionURL is the configured endpoint, or the discovered one.
func (p *Provider) introspectionURL(ctx context.Context) (string, error) {
	if u := p.introspect.cfg.URL; u != "" {
		return u, nil
	}
	d, err := p.provider(ctx)
	if err != nil {
		return "", err
	}
	var doc struct {
		Endpoint string `json:"introspection_endpoint"`
	}
	if err := d.Claims(&doc); err != nil || doc.Endpoint == "" {
		return "", fmt.Errorf("the discovery document of %s names no introspection_endpoint: configure its URL", p.cfg.Issuer)
	}
	// The gateway's client secret goes there: not in the clear, whatever
	// the document says.
	if !secureURL(doc.Endpoint) {
		return "", fmt.Errorf("the discovery document of %s names introspection_endpoint %q, which is neither https nor on a loopback address", p.cfg.Issuer, doc.Endpoint)
	}
	return doc.Endpoint, nil
}

// secureURL reports whether raw is an https URL, or an http one on a
// loopback address.
func secureURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return false
	}
	switch u.Scheme {
	case "https":
		return true
	case "http":
		ip := net.ParseIP(u.Hostname())
		return u.Hostname() == "localhost" || (ip != nil && ip.IsLoopback())
	}
	return false
}

// answers are the endpoint's answers by the SHA-256 of their token, so
// that no token is kept; at most max of them, the oldest evicted first.
type answers struct {
	max int

	mu    sync.Mutex
	byKey map[[sha256.Size]byte]*list.Element
	// order holds the answers, oldest first.
	order list.List
}

type answer struct {
	key    [sha256.Size]byte
	active bool
	until  time.Time
}

func newAnswers(max int) *answers {
	return &answers{max: max, byKey: map[[sha256.Size]byte]*list.Element{}}
}

// get returns the answer kept for key, unless it is older than its time.
func (a *answers) get(key [sha256.Size]byte, now time.Time) (active, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.byKey[key]
	if !ok {
		return false, false
	}
	ans := e.Value.(*answer)
	if !now.Before(ans.until) {
		a.order.Remove(e)
		delete(a.byKey, key)
		return false, false
	}
	return ans.active, true
}

// put keeps an answer until the time given, evicting the oldest answers
// when there are max.
func (a *answers) put(key [sha256.Size]byte, active bool, until time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e, ok := a.byKey[key]; ok {
		a.order.Remove(e)
		delete(a.byKey, key)
	}
	for a.order.Len() >= a.max {
		oldest := a.order.Front()
		a.order.Remove(oldest)
		delete(a.byKey, oldest.Value.(*answer).key)
	}
	a.byKey[key] = a.order.PushBack(&answer{key: key, active: active, until: until})
}

package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// InstancePath answers whether a console is the one its gateway announced
// in the store (see [Prober]): GET with ?challenge= returns
// {"proof": ...}, the challenge signed with the id the gateway announced.
const InstancePath = "/console/instance"

// instanceLabel binds a proof to its purpose.
const instanceLabel = "interlock console instance v1\n"

// Bounds of a challenge: enough randomness that no answer can be kept
// for later, short enough to cost nothing.
const (
	minChallenge = 32
	maxChallenge = 128
)

// instanceProof is challenge signed with the announced id. The id is the
// key, and only the gateway and whoever reads the store know it: the
// console answers with proofs, never with the id, so a process that
// learned this endpoint's answers while the console ran cannot answer a
// fresh challenge once it took the console's port.
func instanceProof(instance, challenge string) []byte {
	m := hmac.New(sha256.New, []byte(instance))
	m.Write([]byte(instanceLabel))
	m.Write([]byte(challenge))
	return m.Sum(nil)
}

// answerInstance answers a [Prober]'s challenge.
func (c *Console) answerInstance(w http.ResponseWriter, r *http.Request) {
	challenge := r.URL.Query().Get("challenge")
	if c.instance == "" || len(challenge) < minChallenge || len(challenge) > maxChallenge {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"proof": base64.RawURLEncoding.EncodeToString(instanceProof(c.instance, challenge))})
}

// How long a [Prober] waits for a console, and how long it keeps what it
// learned. A console killed without departing stays in the store for a
// while (its announcement ages out); the check, not the announcement,
// decides whether approvers are sent there, and keeping it a few seconds
// keeps calls that wait for approval cheap.
const (
	probeTimeout = 2 * time.Second
	probeKept    = 5 * time.Second
)

// Prober checks that a console a gateway announced in the store answers
// there, as that gateway's, before approvers and their credentials are
// sent to it: a gateway killed without departing leaves its announcement
// behind, and whatever binds its port next would receive them. Safe for
// concurrent use.
type Prober struct {
	client *http.Client
	now    func() time.Time

	mu      sync.Mutex
	checked map[probed]probe
}

type probed struct{ base, instance string }

type probe struct {
	answers bool
	until   time.Time
}

// NewProber returns a prober that asks over HTTP.
func NewProber() *Prober {
	return &Prober{now: time.Now, checked: map[probed]probe{},
		client: &http.Client{
			// A redirect is not the console answering.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// Answers reports whether the console at base (such as
// http://127.0.0.1:8740) is that of the gateway announced as instance:
// it answers a fresh challenge with the proof only that gateway can
// make. What it learned is kept a few seconds.
func (p *Prober) Answers(ctx context.Context, base, instance string) bool {
	if base == "" || instance == "" {
		return false
	}
	key := probed{base, instance}
	p.mu.Lock()
	c, ok := p.checked[key]
	p.mu.Unlock()
	if ok && p.now().Before(c.until) {
		return c.answers
	}
	answers := p.ask(ctx, base, instance) == nil
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	for k, c := range p.checked {
		if !now.Before(c.until) {
			delete(p.checked, k)
		}
	}
	p.checked[key] = probe{answers: answers, until: now.Add(probeKept)}
	return answers
}

// ask sends base's console a fresh challenge and checks its proof.
func (p *Prober) ask(ctx context.Context, base, instance string) error {
	challenge := randomToken()
	target := strings.TrimSuffix(base, "/") + InstancePath + "?challenge=" + url.QueryEscape(challenge)
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	res, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return errors.New(res.Status)
	}
	var answer struct {
		Proof string `json:"proof"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 4<<10)).Decode(&answer); err != nil {
		return err
	}
	proof, err := base64.RawURLEncoding.DecodeString(answer.Proof)
	if err != nil || !hmac.Equal(proof, instanceProof(instance, challenge)) {
		return errors.New("the proof is not the announced console's")
	}
	return nil
}

package oauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// keySet is the issuer's public keys, fetched from its JWKS and cached. A
// key id not in the cache fetches the set again, at most once per every:
// tokens with made-up key ids must not turn the gateway into a client
// that hammers the issuer.
type keySet struct {
	client *http.Client
	now    func() time.Time
	every  time.Duration
	url    func(context.Context) (string, error)

	mu      sync.Mutex
	keys    []jose.JSONWebKey
	fetched time.Time
}

// VerifySignature checks jwt's signature against the issuer's keys and
// returns its payload.
func (s *keySet) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	algs := make([]jose.SignatureAlgorithm, len(Algorithms))
	for i, a := range Algorithms {
		algs[i] = jose.SignatureAlgorithm(a)
	}
	jws, err := jose.ParseSigned(jwt, algs)
	if err != nil {
		return nil, fmt.Errorf("parsing: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("a token needs exactly one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	if payload, ok := verifyWith(jws, s.cached(), kid); ok {
		return payload, nil
	}
	keys, err := s.refresh(ctx)
	if err != nil {
		return nil, err
	}
	if payload, ok := verifyWith(jws, keys, kid); ok {
		return payload, nil
	}
	return nil, fmt.Errorf("no key of the issuer (key id %q) verifies the signature", kid)
}

// verifyWith tries the keys with id kid, or every key when the token
// names none.
func verifyWith(jws *jose.JSONWebSignature, keys []jose.JSONWebKey, kid string) ([]byte, bool) {
	for _, k := range keys {
		if kid != "" && k.KeyID != kid {
			continue
		}
		if payload, err := jws.Verify(k.Key); err == nil {
			return payload, true
		}
	}
	return nil, false
}

func (s *keySet) cached() []jose.JSONWebKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys
}

// refresh fetches the keys again unless they were fetched less than every
// ago; it returns the keys it has either way. Concurrent callers wait for
// one fetch.
func (s *keySet) refresh(ctx context.Context) ([]jose.JSONWebKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if !s.fetched.IsZero() && now.Sub(s.fetched) < s.every {
		return s.keys, nil
	}
	s.fetched = now
	url, err := s.url(ctx)
	if err != nil {
		return nil, fmt.Errorf("finding the issuer's keys: %w", err)
	}
	keys, err := fetchKeys(ctx, s.client, url)
	if err != nil {
		return nil, err
	}
	s.keys = keys
	return keys, nil
}

// fetchKeys reads a JWKS and keeps its asymmetric public signing keys;
// keys of other kinds are skipped, as RFC 7517 section 5 asks.
func fetchKeys(ctx context.Context, client *http.Client, url string) ([]jose.JSONWebKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("fetching the issuer's keys: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching the issuer's keys: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the issuer's keys: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching the issuer's keys from %s: %s", url, resp.Status)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("the issuer's keys at %s: %w", url, err)
	}
	var keys []jose.JSONWebKey
	for _, raw := range set.Keys {
		var k jose.JSONWebKey
		if json.Unmarshal(raw, &k) != nil || (k.Use != "" && k.Use != "sig") {
			continue
		}
		switch k.Key.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
			keys = append(keys, k)
		}
	}
	return keys, nil
}

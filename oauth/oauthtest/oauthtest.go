// Package oauthtest is an OAuth 2.1 authorization server and OpenID
// provider for tests: discovery, a JWKS with an RSA and an EC key that can
// be rotated, an authorization endpoint that consents at once for a
// configured user and checks PKCE, a token endpoint, and an introspection
// endpoint (RFC 7662) that a test can tell to revoke a token or to fail.
// It also mints access tokens, good and bad, for the tests of a resource
// server.
package oauthtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Key is one signing key of the issuer.
type Key struct {
	ID  string
	Alg jose.SignatureAlgorithm
	// Private signs; its public half is in the JWKS while the key is
	// published.
	Private crypto.Signer
}

// Client is a client registered with the issuer.
type Client struct {
	ID, Secret, RedirectURI string
}

// Issuer is a running test issuer.
type Issuer struct {
	// URL is the issuer identifier and the server's base URL.
	URL    string
	server *httptest.Server
	t      testing.TB

	mu        sync.Mutex
	published []*Key
	clients   map[string]Client
	codes     map[string]grant
	// User is the claims of whom /authorize signs in, at once.
	user map[string]any
	// Audience is put in the access tokens /token issues.
	audience string
	// idOverrides replace claims of the ID tokens /token issues.
	idOverrides map[string]any
	// revoked holds the SHA-256 of the tokens /introspect calls inactive.
	revoked map[[sha256.Size]byte]bool
	// introspectionFailing makes /introspect answer this status when not
	// zero.
	introspectionFailing int
	// codesAgain makes /token redeem a code any number of times.
	codesAgain bool

	jwksFetches    atomic.Int64
	introspections atomic.Int64
	serial         atomic.Int64
}

// grant is an authorization code waiting to be redeemed.
type grant struct {
	client, redirect, challenge, nonce string
}

// Start runs an issuer with an RSA key ("rsa-1") and an EC key ("ec-1")
// published; it stops when the test ends.
func Start(t testing.TB) *Issuer {
	t.Helper()
	iss := &Issuer{t: t, clients: map[string]Client{}, codes: map[string]grant{},
		user: map[string]any{"sub": "user-1"}, revoked: map[[sha256.Size]byte]bool{}}
	iss.published = []*Key{iss.NewRSAKey("rsa-1"), iss.NewECKey("ec-1")}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", iss.discovery)
	mux.HandleFunc("GET /jwks", iss.jwks)
	mux.HandleFunc("GET /authorize", iss.authorize)
	mux.HandleFunc("POST /token", iss.token)
	mux.HandleFunc("POST /introspect", iss.introspect)
	iss.server = httptest.NewServer(mux)
	iss.URL = iss.server.URL
	t.Cleanup(iss.server.Close)
	return iss
}

// NewRSAKey makes an RSA key, not yet published.
func (iss *Issuer) NewRSAKey(id string) *Key {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		iss.t.Fatal(err)
	}
	return &Key{ID: id, Alg: jose.RS256, Private: k}
}

// NewECKey makes a P-256 key, not yet published.
func (iss *Issuer) NewECKey(id string) *Key {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		iss.t.Fatal(err)
	}
	return &Key{ID: id, Alg: jose.ES256, Private: k}
}

// Keys returns the published keys; the first signs by default.
func (iss *Issuer) Keys() []*Key {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	return append([]*Key(nil), iss.published...)
}

// Publish replaces the published keys: a rotation.
func (iss *Issuer) Publish(keys ...*Key) {
	iss.mu.Lock()
	iss.published = keys
	iss.mu.Unlock()
}

// JWKSFetches counts the requests for the JWKS so far.
func (iss *Issuer) JWKSFetches() int64 { return iss.jwksFetches.Load() }

// Revoke makes /introspect call token inactive from now on.
func (iss *Issuer) Revoke(token string) {
	iss.mu.Lock()
	iss.revoked[sha256.Sum256([]byte(token))] = true
	iss.mu.Unlock()
}

// FailIntrospection makes /introspect answer status, as an endpoint that
// is down behind a proxy does; 0 makes it answer again.
func (iss *Issuer) FailIntrospection(status int) {
	iss.mu.Lock()
	iss.introspectionFailing = status
	iss.mu.Unlock()
}

// Introspections counts the requests to /introspect so far.
func (iss *Issuer) Introspections() int64 { return iss.introspections.Load() }

// Register adds a client.
func (iss *Issuer) Register(c Client) {
	iss.mu.Lock()
	iss.clients[c.ID] = c
	iss.mu.Unlock()
}

// OverrideIDClaims makes the ID tokens /token issues from now on carry
// claims in place of the issuer's own (such as an aud that names several
// clients, or an azp); nil restores them.
func (iss *Issuer) OverrideIDClaims(claims map[string]any) {
	iss.mu.Lock()
	iss.idOverrides = maps.Clone(claims)
	iss.mu.Unlock()
}

// RedeemCodesAgain makes /token redeem each code as often as it is
// presented, as a provider that does not spend its codes would: what
// keeps a sign-in from being replayed is then the client's alone.
func (iss *Issuer) RedeemCodesAgain() {
	iss.mu.Lock()
	iss.codesAgain = true
	iss.mu.Unlock()
}

// SignInAs sets the claims of whom /authorize signs in; audience is the
// aud of the access tokens /token issues with the ID token.
func (iss *Issuer) SignInAs(claims map[string]any, audience string) {
	iss.mu.Lock()
	iss.user, iss.audience = claims, audience
	iss.mu.Unlock()
}

// AccessClaims returns the claims of a valid access token for audience
// and subject, valid for an hour from now.
func (iss *Issuer) AccessClaims(audience, subject string) map[string]any {
	now := time.Now()
	return map[string]any{
		"iss": iss.URL, "aud": audience, "sub": subject, "client_id": "test-client",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		"jti": fmt.Sprintf("jti-%d", iss.serial.Add(1)),
	}
}

// Sign signs claims with key (the first published key when nil) under
// the header typ "at+jwt", unless header overrides it ("typ": nil drops
// it).
func (iss *Issuer) Sign(key *Key, claims map[string]any, header map[string]any) string {
	if key == nil {
		key = iss.Keys()[0]
	}
	opts := (&jose.SignerOptions{}).WithHeader("kid", key.ID).WithType("at+jwt")
	for k, v := range header {
		if v == nil {
			delete(opts.ExtraHeaders, jose.HeaderKey(k))
			continue
		}
		opts = opts.WithHeader(jose.HeaderKey(k), v)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: key.Alg, Key: key.Private}, opts)
	if err != nil {
		iss.t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		iss.t.Fatal(err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		iss.t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		iss.t.Fatal(err)
	}
	return out
}

// Unsigned returns claims as a JWT with "alg": "none" and no signature.
func Unsigned(claims map[string]any) string {
	return compact(map[string]any{"alg": "none", "typ": "at+jwt"}, claims, nil)
}

// HMACSigned returns claims as a JWT signed with HS256 keyed by secret,
// such as the bytes of an issuer's public key: the algorithm confusion
// a verifier must refuse.
func HMACSigned(kid string, secret []byte, claims map[string]any) string {
	return compact(map[string]any{"alg": "HS256", "typ": "at+jwt", "kid": kid}, claims, secret)
}

func compact(header, claims map[string]any, hmacKey []byte) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signing := enc(header) + "." + enc(claims)
	if hmacKey == nil {
		return signing + "."
	}
	return signing + "." + base64.RawURLEncoding.EncodeToString(hmacSHA256(hmacKey, []byte(signing)))
}

func (iss *Issuer) discovery(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                iss.URL,
		"authorization_endpoint":                iss.URL + "/authorize",
		"token_endpoint":                        iss.URL + "/token",
		"jwks_uri":                              iss.URL + "/jwks",
		"introspection_endpoint":                iss.URL + "/introspect",
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256", "ES256"},
		"code_challenge_methods_supported":      []string{"S256"},
	})
}

func (iss *Issuer) jwks(w http.ResponseWriter, _ *http.Request) {
	iss.jwksFetches.Add(1)
	var set jose.JSONWebKeySet
	for _, k := range iss.Keys() {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.Private.Public(), KeyID: k.ID, Algorithm: string(k.Alg), Use: "sig"})
	}
	writeJSON(w, http.StatusOK, set)
}

// authorize consents at once for the configured user, after checking the
// client, its redirect URI and that a PKCE S256 challenge came along.
func (iss *Issuer) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	iss.mu.Lock()
	c, known := iss.clients[q.Get("client_id")]
	iss.mu.Unlock()
	switch {
	case !known || q.Get("redirect_uri") != c.RedirectURI:
		http.Error(w, "unknown client or redirect_uri", http.StatusBadRequest)
		return
	case q.Get("response_type") != "code", q.Get("code_challenge_method") != "S256", q.Get("code_challenge") == "",
		q.Get("state") == "", q.Get("nonce") == "":
		http.Error(w, "response_type=code, state, nonce and an S256 code_challenge are required", http.StatusBadRequest)
		return
	}
	code := fmt.Sprintf("code-%d", iss.serial.Add(1))
	iss.mu.Lock()
	iss.codes[code] = grant{client: c.ID, redirect: c.RedirectURI, challenge: q.Get("code_challenge"), nonce: q.Get("nonce")}
	iss.mu.Unlock()
	back, _ := url.Parse(c.RedirectURI)
	v := back.Query()
	v.Set("code", code)
	v.Set("state", q.Get("state"))
	back.RawQuery = v.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

// token redeems a code once (see [Issuer.RedeemCodesAgain]), for the client it was issued to, with the
// verifier of its challenge.
func (iss *Issuer) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request"})
		return
	}
	id, secret, basic := r.BasicAuth()
	if !basic {
		id, secret = r.PostFormValue("client_id"), r.PostFormValue("client_secret")
	}
	code := r.PostFormValue("code")
	iss.mu.Lock()
	g, ok := iss.codes[code]
	if !iss.codesAgain {
		delete(iss.codes, code)
	}
	c := iss.clients[id]
	user, audience, overrides := maps.Clone(iss.user), iss.audience, maps.Clone(iss.idOverrides)
	iss.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostFormValue("code_verifier")))
	switch {
	case r.PostFormValue("grant_type") != "authorization_code" || !ok:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
		return
	case g.client != id || c.Secret != secret:
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
		return
	case r.PostFormValue("redirect_uri") != g.redirect || base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant", "error_description": "PKCE or redirect_uri mismatch"})
		return
	}
	now := time.Now()
	idClaims := maps.Clone(user)
	maps.Copy(idClaims, map[string]any{"iss": iss.URL, "aud": id, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "nonce": g.nonce})
	maps.Copy(idClaims, overrides)
	access := iss.AccessClaims(audience, fmt.Sprint(user["sub"]))
	access["client_id"] = id
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": iss.Sign(nil, access, nil),
		"token_type":   "Bearer",
		"expires_in":   3600,
		"id_token":     iss.Sign(nil, idClaims, map[string]any{"typ": "JWT"}),
	})
}

// introspect answers whether a token is active (RFC 7662): signed by a
// published key, not expired and not revoked. Only a registered client
// may ask, with HTTP Basic whose id and secret are form-encoded (RFC 6749
// section 2.3.1), and it must hint that the token is an access token.
func (iss *Issuer) introspect(w http.ResponseWriter, r *http.Request) {
	iss.introspections.Add(1)
	iss.mu.Lock()
	failing := iss.introspectionFailing
	iss.mu.Unlock()
	if failing != 0 {
		http.Error(w, "introspection is down", failing)
		return
	}
	rawID, rawSecret, basic := r.BasicAuth()
	id, idErr := url.QueryUnescape(rawID)
	secret, secretErr := url.QueryUnescape(rawSecret)
	iss.mu.Lock()
	c, known := iss.clients[id]
	iss.mu.Unlock()
	if !basic || idErr != nil || secretErr != nil || !known || c.Secret != secret {
		w.Header().Set("WWW-Authenticate", `Basic realm="oauthtest"`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
		return
	}
	if err := r.ParseForm(); err != nil || r.PostFormValue("token") == "" || r.PostFormValue("token_type_hint") != "access_token" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request"})
		return
	}
	token := r.PostFormValue("token")
	iss.mu.Lock()
	revoked := iss.revoked[sha256.Sum256([]byte(token))]
	iss.mu.Unlock()
	claims, ok := iss.verify(token)
	exp, _ := claims["exp"].(float64)
	if revoked || !ok || time.Now().After(time.Unix(int64(exp), 0)) {
		writeJSON(w, http.StatusOK, map[string]any{"active": false})
		return
	}
	answer := map[string]any{"active": true, "token_type": "Bearer"}
	for _, name := range []string{"iss", "sub", "aud", "client_id", "scope", "exp", "iat", "jti"} {
		if v, ok := claims[name]; ok {
			answer[name] = v
		}
	}
	writeJSON(w, http.StatusOK, answer)
}

// verify returns the claims of a token signed by a published key.
func (iss *Issuer) verify(token string) (map[string]any, bool) {
	jws, err := jose.ParseSigned(token, []jose.SignatureAlgorithm{jose.RS256, jose.ES256})
	if err != nil || len(jws.Signatures) != 1 {
		return nil, false
	}
	for _, k := range iss.Keys() {
		if k.ID != jws.Signatures[0].Header.KeyID {
			continue
		}
		payload, err := jws.Verify(k.Private.Public())
		if err != nil {
			return nil, false
		}
		var claims map[string]any
		if json.Unmarshal(payload, &claims) != nil {
			return nil, false
		}
		return claims, true
	}
	return nil, false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func hmacSHA256(key, data []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(data)
	return m.Sum(nil)
}

package oauth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// SignIn signs people in with the provider's issuer: the OpenID Connect
// authorization code flow with PKCE (S256), state and nonce.
type SignIn struct {
	p        *Provider
	clientID string
	secret   string
	redirect string
	scopes   []string
	idTokens *oidc.IDTokenVerifier
}

// SignInScopes are the scopes every sign-in asks for.
var SignInScopes = []string{oidc.ScopeOpenID, "profile", "email"}

// SignIn returns the sign-in of the client clientID (secret may be empty
// for a public client), whose redirect URI is redirect. It asks for
// SignInScopes and the extra ones given, such as groups for a provider
// that puts the groups claim in ID tokens only when asked.
func (p *Provider) SignIn(clientID, secret, redirect string, extra ...string) *SignIn {
	scopes := slices.Clone(SignInScopes)
	for _, s := range extra {
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	return &SignIn{p: p, clientID: clientID, secret: secret, redirect: redirect, scopes: scopes,
		idTokens: oidc.NewVerifier(p.cfg.Issuer, p.keys, &oidc.Config{ClientID: clientID,
			SupportedSigningAlgs: Algorithms, Now: p.cfg.Now})}
}

func (s *SignIn) config(ctx context.Context) (*oauth2.Config, error) {
	d, err := s.p.provider(ctx)
	if err != nil {
		return nil, err
	}
	return &oauth2.Config{ClientID: s.clientID, ClientSecret: s.secret, Endpoint: d.Endpoint(),
		RedirectURL: s.redirect, Scopes: s.scopes}, nil
}

// AuthURL returns where to send the browser: the issuer's authorization
// endpoint with state, nonce and the S256 challenge of verifier.
func (s *SignIn) AuthURL(ctx context.Context, state, nonce, verifier string) (string, error) {
	c, err := s.config(ctx)
	if err != nil {
		return "", err
	}
	return c.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), nil
}

// Exchange redeems an authorization code with its PKCE verifier, checks
// the ID token it brings (signature, issuer, audience, lifetime, nonce)
// and returns whom it names.
func (s *SignIn) Exchange(ctx context.Context, code, verifier, nonce string) (*Identity, error) {
	c, err := s.config(ctx)
	if err != nil {
		return nil, err
	}
	ctx = context.WithValue(ctx, oauth2.HTTPClient, s.p.cfg.Client)
	tok, err := c.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, fmt.Errorf("redeeming the code: %w", err)
	}
	raw, ok := tok.Extra("id_token").(string)
	if !ok || raw == "" {
		return nil, errors.New("the token response carries no id_token")
	}
	idt, err := s.idTokens.Verify(oidc.ClientContext(ctx, s.p.cfg.Client), raw)
	if err != nil {
		return nil, fmt.Errorf("%w: ID token: %w", ErrInvalidToken, err)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(nonce)) != 1 || nonce == "" {
		return nil, fmt.Errorf("%w: ID token: the nonce does not match", ErrInvalidToken)
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return nil, fmt.Errorf("%w: ID token claims: %w", ErrInvalidToken, err)
	}
	if err := s.checkAuthorizedParty(idt.Audience, claims["azp"]); err != nil {
		return nil, err
	}
	return s.p.identity(claims)
}

// checkAuthorizedParty applies OpenID Connect Core 3.1.3.7: an ID token
// whose aud names several clients must name this one as its authorized
// party (azp), and an azp that is present must be this client. Otherwise
// a token the provider issued to another client that merely lists this
// one would sign someone in here.
func (s *SignIn) checkAuthorizedParty(aud []string, azp any) error {
	party, present := azp.(string)
	switch {
	case azp != nil && !present:
		return fmt.Errorf("%w: ID token: azp is not a string", ErrInvalidToken)
	case len(aud) > 1 && !present:
		return fmt.Errorf("%w: ID token: aud names %d clients and azp is missing", ErrInvalidToken, len(aud))
	case present && subtle.ConstantTimeCompare([]byte(party), []byte(s.clientID)) != 1:
		return fmt.Errorf("%w: ID token: azp names another client", ErrInvalidToken)
	}
	return nil
}

// Package exchange says what a tool call's transport can carry back to
// its client before the call completes (a form for a human, a URL to open,
// a request for a model's completion or the client's roots) and what the
// client sent back, read from the go-sdk's request: the client's declared
// capabilities, its protocol generation (a client of 2026-07-28 is asked
// by the call's result and answers by retrying; one of an earlier protocol
// is asked by a request on its session) and whether it has a session at
// all. The gate's modes and the gateway's relay of an upstream's questions
// read it alike.
package exchange

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Exchange is what a call's transport can carry back to a human before the
// call completes, and what came back.
type Exchange struct {
	// Form reports that the client can show a form to a human during this
	// call: it declared form elicitation, and either speaks multi round-trip
	// requests or keeps a session the server can send a request on.
	Form bool
	// Native reports that the client speaks multi round-trip requests
	// (protocol 2026-07-28): it answers input requests by retrying the call.
	// A client with Form but not Native is asked by elicitation/create on its
	// session instead.
	Native bool
	// Responses and State are what a client sends when it retries a call
	// that answered with input requests.
	Responses mcp.InputResponseMap
	State     string
	// Ask sends a form to a client of an earlier protocol on its session
	// and waits for the answer; nil for MRTR clients, which are asked by
	// the call's result instead.
	Ask func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error)
	// ShowURL, when set, sends a URL for the human to open on the
	// client's session (URL-mode elicitation): a client of an earlier
	// protocol that declared it.
	ShowURL func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error)

	// ask, when set, replaces the session's Elicit in Ask and ShowURL
	// (see [Via]).
	ask func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error)

	// req, when set, is read for Form, Native and Ask only when a mode
	// needs them (see [Exchange.Resolved]), so calls that run at once pay nothing for
	// decoding the client's capabilities.
	req *mcp.CallToolRequest
}

// Via is the exchange of req, read only when a mode asks ([Exchange.Resolved]):
// a call that runs at once pays nothing for it. ask, when not nil, sends the
// forms of a client of an earlier protocol in place of its session's Elicit,
// for a transport that carries a call's messages itself.
func Via(req *mcp.CallToolRequest, ask func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error)) Exchange {
	return Exchange{Responses: req.Params.InputResponses, State: req.Params.RequestState, req: req, ask: ask}
}

// Request is the request the exchange was made for ([Via]), or nil.
func (ex Exchange) Request() *mcp.CallToolRequest { return ex.req }

// Resolved returns the exchange with what the client can carry read from
// its request.
func (ex Exchange) Resolved() Exchange {
	if ex.req == nil {
		return ex
	}
	out := Of(ex.req)
	if ex.ask != nil {
		if out.Ask != nil {
			out.Ask = ex.ask
		}
		if out.ShowURL != nil {
			out.ShowURL = ex.ask
		}
	}
	return out
}

// Of reads what the client of req can carry and what it answered.
func Of(req *mcp.CallToolRequest) Exchange {
	ex := Exchange{Responses: req.Params.InputResponses, State: req.Params.RequestState}
	caps := req.ClientCapabilities()
	// Since 2025-11-25 "elicitation": {} still means form support; a client
	// that lists only URL mode cannot show a form.
	form := caps != nil && caps.Elicitation != nil && (caps.Elicitation.Form != nil || caps.Elicitation.URL == nil)
	ex.Native = ProtocolVersion(req) >= ProtocolMRTR
	// A stateless HTTP request has no session the server could send an
	// elicitation on; only a client that retries with answers can be asked.
	stateless := statelessHTTP(req)
	ex.Form = form && req.Session != nil && (ex.Native || !stateless)
	if ex.Form && !ex.Native {
		ex.Ask = req.Session.Elicit
	}
	if caps != nil && caps.Elicitation != nil && caps.Elicitation.URL != nil && req.Session != nil && !ex.Native && !stateless {
		ex.ShowURL = req.Session.Elicit
	}
	return ex
}

// statelessHTTP reports whether req came over HTTP without a session, on
// which a server cannot send the client a request.
func statelessHTTP(req *mcp.CallToolRequest) bool {
	return req.Extra != nil && req.Extra.Header != nil && req.Session != nil && req.Session.ID() == ""
}

// ProtocolMRTR is the first protocol version with multi round-trip requests.
const ProtocolMRTR = "2026-07-28"

// ProtocolVersion is the protocol version of req: the one its _meta names
// (2026-07-28 and later), else its session's.
func ProtocolVersion(req *mcp.CallToolRequest) string {
	if v, ok := req.Params.Meta[mcp.MetaKeyProtocolVersion].(string); ok && v != "" {
		return v
	}
	if req.Session != nil {
		if p := req.Session.InitializeParams(); p != nil {
			return p.ProtocolVersion
		}
	}
	return ""
}

// Answers reports whether the client of ex can answer every input request
// in reqs: it can be asked during this call (see [Of]) and
// declared what each asks: a form, a URL to open, a model's completion,
// its roots.
func (ex Exchange) Answers(reqs mcp.InputRequestMap) bool {
	r := ex.Resolved()
	if ex.req == nil {
		return r.Form
	}
	caps := ex.req.ClientCapabilities()
	if caps == nil || ex.req.Session == nil || (!r.Native && statelessHTTP(ex.req)) {
		return false
	}
	for _, q := range reqs {
		switch q := q.(type) {
		case *mcp.ElicitParams:
			if q.Mode == "url" && (caps.Elicitation == nil || caps.Elicitation.URL == nil) {
				return false
			}
			if q.Mode != "url" && !r.Form {
				return false
			}
		case *mcp.CreateMessageParams, *mcp.CreateMessageWithToolsParams:
			if caps.Sampling == nil {
				return false
			}
		case *mcp.ListRootsParams:
			if caps.RootsV2 == nil && !caps.Roots.ListChanged {
				return false
			}
		default:
			return false
		}
	}
	return true
}

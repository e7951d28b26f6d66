package exchange_test

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlock-mcp/interlock/exchange"
)

// A request without a session (the library's own calls) can carry nothing
// back; its protocol comes from _meta when the client of 2026-07-28 names
// it there.
func TestOfWithoutSession(t *testing.T) {
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "t", RequestState: "s",
		Meta: mcp.Meta{mcp.MetaKeyProtocolVersion: exchange.ProtocolMRTR}}}
	ex := exchange.Of(req)
	if ex.Form || ex.Ask != nil || ex.ShowURL != nil || ex.State != "s" || !ex.Native {
		t.Errorf("Of = %+v, want native, no form, the request state kept", ex)
	}
	if v := exchange.ProtocolVersion(&mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{}}); v != "" {
		t.Errorf("ProtocolVersion of a bare request = %q", v)
	}
	lazy := exchange.Via(req, func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error) { return nil, nil })
	if lazy.Request() != req || lazy.Native {
		t.Errorf("Via read the request before a mode asked: %+v", lazy)
	}
	if r := lazy.Resolved(); !r.Native || r.Ask != nil {
		t.Errorf("Resolved = %+v: an ask replaces only a session's Elicit, and there is none", r)
	}
	if lazy.Answers(mcp.InputRequestMap{"q": &mcp.ElicitParams{Mode: "form"}}) {
		t.Error("a request without a session answers a form")
	}
	if !(exchange.Exchange{Form: true}).Answers(mcp.InputRequestMap{"q": &mcp.ElicitParams{}}) {
		t.Error("an exchange that says it shows forms does not answer one")
	}
}

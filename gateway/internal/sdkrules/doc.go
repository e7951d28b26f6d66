// Package sdkrules holds every rule the gateway copies from the go-sdk, so
// that its fast path can answer as the SDK would without running the SDK's
// server. The lane (gateway/lane.go) serves tools/call from a body the
// gateway has already read; to take only what the SDK would take, and to
// answer what it would answer, it needs rules the SDK keeps unexported: the
// checks its streamable HTTP handler makes of a POST (the DNS-rebinding
// Host check, Content-Type, Accept, Last-Event-ID, the Mcp-Method and
// Mcp-Name headers), who may use a session and when an idle one closes,
// what its server accepts in the _meta of a request of 2026-07-28, what it
// adds to a tools/call result (content never null, resultType, serverInfo),
// and the type of each method's params. Each copy is small, and each is
// listed in [Mirrors] with the SDK file, line and declaration it mirrors at
// [SDKVersion]; a test fails when go.mod names another version, and another
// when a mirrored declaration is gone from the SDK's source.
//
// The copies exist because the SDK decodes each message itself: its
// streamable handler reads the body again (io.ReadAll, then readBatch, in
// ephemeralConnectOpts and servePOST), and only its connection can run a
// call through the server. Were the SDK to take the messages a caller has
// already decoded, say a []jsonrpc.Message in the request's context that
// servePOST and ephemeralConnectOpts read in place of the body, the gateway
// could hand every request to the SDK, and the lane, with every rule here,
// could go.
//
// One thing of the SDK's the gateway does not copy but avoids: its
// StdioTransport reads os.Stdin as the process was given it, a pipe in
// blocking mode, so the goroutine that waits for the client's next line
// sleeps in read(2), where the Go 1.26 runtime can stall the whole process
// (internal/pollable says how). ServeStdio reads through the runtime's
// poller instead. StdioTransport would be rid of the stall by doing the
// same: reading a pipe it finds in blocking mode from a new, non-blocking
// open of it, as pollable.Open does, or taking the reader from its caller
// as IOTransport does.
package sdkrules

// SDKVersion is the go-sdk version every entry of Mirrors was checked
// against.
const SDKVersion = "v1.8.0"

// SDKModule is the go-sdk's module path.
const SDKModule = "github.com/modelcontextprotocol/go-sdk"

// A Mirror is one rule of the SDK's that this package copies.
type Mirror struct {
	Rule string // what the rule says, in a phrase
	Home string // the declaration of this package that holds the copy
	// SDKFile is the file of the go-sdk module, SDKLine the line of the
	// rule in it at SDKVersion, and SDKFunc the declaration that line is
	// in: "name", or "(*Type).name" for a method.
	SDKFile string
	SDKLine int
	SDKFunc string
	// Note says where the copy knowingly differs from the SDK, if it does.
	Note string
}

// Mirrors lists the rules copied from the go-sdk at SDKVersion.
var Mirrors = []Mirror{
	{Rule: "the first protocol version served without sessions", Home: "Protocol20260728",
		SDKFile: "mcp/shared.go", SDKLine: 51, SDKFunc: "protocolVersion20260728"},

	// Streamable HTTP: the headers, and the checks of a POST.
	{Rule: "the protocol version header", Home: "ProtocolVersionHeader",
		SDKFile: "mcp/streamable_headers.go", SDKLine: 24, SDKFunc: "protocolVersionHeader"},
	{Rule: "the session id header", Home: "SessionIDHeader",
		SDKFile: "mcp/streamable_headers.go", SDKLine: 25, SDKFunc: "sessionIDHeader"},
	{Rule: "the Last-Event-ID header", Home: "LastEventIDHeader",
		SDKFile: "mcp/streamable_headers.go", SDKLine: 26, SDKFunc: "lastEventIDHeader"},
	{Rule: "the Mcp-Method header", Home: "MethodHeader",
		SDKFile: "mcp/streamable_headers.go", SDKLine: 27, SDKFunc: "methodHeader"},
	{Rule: "the Mcp-Name header", Home: "NameHeader",
		SDKFile: "mcp/streamable_headers.go", SDKLine: 28, SDKFunc: "nameHeader"},
	{Rule: "a loopback listener reached by a Host that is not loopback is refused (DNS rebinding)", Home: "Rebinding",
		SDKFile: "mcp/streamable.go", SDKLine: 321, SDKFunc: "(*StreamableHTTPHandler).ServeHTTP"},
	{Rule: "what a loopback address or Host is", Home: "IsLoopback",
		SDKFile: "internal/util/net.go", SDKLine: 12, SDKFunc: "IsLoopback"},
	{Rule: "a POST to a session must declare its body application/json", Home: "JSONContent",
		SDKFile: "mcp/streamable.go", SDKLine: 622, SDKFunc: "(*StreamableHTTPHandler).serveStatefulPOST"},
	{Rule: "a POST without sessions must declare its body application/json", Home: "JSONContent",
		SDKFile: "mcp/streamable.go", SDKLine: 388, SDKFunc: "(*StreamableHTTPHandler).serveStateless"},
	{Rule: "a media type is read with its parameters dropped", Home: "JSONContent",
		SDKFile: "mcp/streamable.go", SDKLine: 762, SDKFunc: "baseMediaType"},
	{Rule: "a POST to a session must accept both JSON and an event stream", Home: "Accepts",
		SDKFile: "mcp/streamable.go", SDKLine: 627, SDKFunc: "(*StreamableHTTPHandler).serveStatefulPOST"},
	{Rule: "a POST without sessions must accept both JSON and an event stream", Home: "Accepts",
		SDKFile: "mcp/streamable.go", SDKLine: 394, SDKFunc: "(*StreamableHTTPHandler).serveStateless"},
	{Rule: "how the Accept header is read", Home: "Accepts",
		SDKFile: "mcp/streamable.go", SDKLine: 742, SDKFunc: "streamableAccepts"},
	{Rule: "a POST may not carry Last-Event-ID", Home: "POSTAccepted",
		SDKFile: "mcp/streamable.go", SDKLine: 1416, SDKFunc: "(*streamableServerConn).servePOST"},
	{Rule: "a request of 2026-07-28 names in its header the protocol version its _meta names", Home: "ToolCallHeaders",
		SDKFile: "mcp/streamable.go", SDKLine: 1573, SDKFunc: "(*streamableServerConn).servePOST"},
	{Rule: "Mcp-Method names the request's method", Home: "ToolCallHeaders",
		SDKFile: "mcp/streamable_headers.go", SDKLine: 371, SDKFunc: "validateMcpHeaders"},
	{Rule: "Mcp-Name names the tool a tools/call calls", Home: "ToolCallHeaders",
		SDKFile: "mcp/streamable_headers.go", SDKLine: 386, SDKFunc: "validateMcpHeaders"},

	// Sessions.
	{Rule: "a session belongs to the UserID of the token that opened it", Home: "SessionOwner",
		SDKFile: "mcp/streamable.go", SDKLine: 713, SDKFunc: "(*StreamableHTTPHandler).serveStatefulPOST"},
	{Rule: "only a token of the same UserID may use an owned session", Home: "MayUse",
		SDKFile: "mcp/streamable.go", SDKLine: 569, SDKFunc: "(*StreamableHTTPHandler).lookupSession"},
	{Rule: "an idle session closes after the timeout", Home: "NewIdleTimer",
		SDKFile: "mcp/streamable.go", SDKLine: 723, SDKFunc: "(*StreamableHTTPHandler).serveStatefulPOST"},
	{Rule: "a POST in progress holds the idle timer", Home: "(*IdleTimer).StartPOST",
		SDKFile: "mcp/streamable.go", SDKLine: 90, SDKFunc: "(*sessionInfo).startPOST"},
	{Rule: "the idle time starts when the last POST ends", Home: "(*IdleTimer).EndPOST",
		SDKFile: "mcp/streamable.go", SDKLine: 113, SDKFunc: "(*sessionInfo).endPOST"},
	{Rule: "a closed session's timer stops for good", Home: "(*IdleTimer).Stop",
		SDKFile: "mcp/streamable.go", SDKLine: 123, SDKFunc: "(*sessionInfo).stopTimer"},

	// The server: requests of 2026-07-28, params, and tools/call results.
	{Rule: "a request naming a protocol in _meta names the client's capabilities, and its info if any, as objects of their types", Home: "LatestMeta",
		SDKFile: "mcp/shared.go", SDKLine: 591, SDKFunc: "validateRequestMeta",
		Note: "the copy also wants a non-empty clientInfo name, and declines what it cannot judge without decoding"},
	{Rule: "a request naming a protocol the server does not serve is refused", Home: "LatestMeta",
		SDKFile: "mcp/server.go", SDKLine: 1957, SDKFunc: "(*ServerSession).handle",
		Note: "the copy takes 2026-07-28 alone, the latest version the gateway's server serves"},
	{Rule: "a message on an event stream is one event named message, its data the message", Home: "WriteMessageEvent",
		SDKFile: "mcp/event.go", SDKLine: 44, SDKFunc: "writeEvent",
		Note: "without an event id or a flush: the lane keeps no events to resume, and flushes where it must"},
	{Rule: "a question sent without a mode has one inferred: url when it names a URL or an elicitation id, else form", Home: "ElicitMode",
		SDKFile: "mcp/protocol.go", SDKLine: 2166, SDKFunc: "(*ElicitParams).inferElicitMode",
		Note: "the SDK's ElicitParams writes an empty mode as \"mode\": \"\", which clients such as the TypeScript SDK 1.x refuse"},
	{Rule: "the params type of each method the server receives", Home: "NewParams",
		SDKFile: "mcp/server.go", SDKLine: 1871, SDKFunc: "serverMethodInfos",
		Note: "only the methods the gateway reads first; initialize is read as InitializeParams, not the SDK's initializeParamsV2"},
	{Rule: "initialize's params are read by a method of their own", Home: "NewParams",
		SDKFile: "mcp/server.go", SDKLine: 1895, SDKFunc: "initializeMethodInfo"},
	{Rule: "a call of a tool the server does not have is an invalid-params error", Home: "UnknownTool",
		SDKFile: "mcp/server.go", SDKLine: 1010, SDKFunc: "(*Server).callTool"},
	{Rule: "a tool's result has content, never null", Home: "NonNullContent",
		SDKFile: "mcp/server.go", SDKLine: 1018, SDKFunc: "(*Server).callTool",
		Note: "the SDK leaves content null only when the result asks for input of a client of 2026-07-28; the copy whenever it asks for input"},
	{Rule: "the server completes the results of clients of 2026-07-28 and later", Home: "CompletesResults",
		SDKFile: "mcp/mrtr.go", SDKLine: 70, SDKFunc: "clientSupportsMultiRoundTrip",
		Note: "a session without InitializeParams the SDK takes for the latest protocol; the gateway's callers decline it first"},
	{Rule: "a result with both content and input requests is a server bug", Home: "Complete",
		SDKFile: "mcp/mrtr.go", SDKLine: 45, SDKFunc: "handleMultiRoundTripResult",
		Note: "the SDK counts structuredContent as content too; the copy counts content alone"},
	{Rule: "a result for a client of 2026-07-28 says whether it asks for input", Home: "Complete",
		SDKFile: "mcp/mrtr.go", SDKLine: 57, SDKFunc: "handleMultiRoundTripResult"},
	{Rule: "a result for a client of 2026-07-28 is otherwise complete", Home: "Complete",
		SDKFile: "mcp/server.go", SDKLine: 2043, SDKFunc: "(*ServerSession).handle"},
	{Rule: "a result for a client of 2026-07-28 names the server in _meta, unless it names one", Home: "Complete",
		SDKFile: "mcp/server.go", SDKLine: 2063, SDKFunc: "annotateServerInfo"},
	{Rule: "a result for a client before 2026-07-28 is not completed (no resultType, no serverInfo)", Home: "Earlier",
		SDKFile: "mcp/server.go", SDKLine: 2063, SDKFunc: "annotateServerInfo",
		Note: "the inverse of Complete, for a result read on a link of 2026-07-28 and sent to a client of an earlier protocol"},
}

package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// TestPipeConnReadsAChildsOutput feeds the connection to a child what a
// child may write, well formed or not, and checks each message it reads,
// or the error that ends the link.
func TestPipeConnReadsAChildsOutput(t *testing.T) {
	tests := []struct {
		name   string
		output string
		want   []string // each message read, as %T method-or-id
		err    string   // the error that ends the reading, "" for EOF
	}{
		{"a request, a notification, a response", `{"jsonrpc":"2.0","id":1,"method":"roots/list"}` + "\n" +
			`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info"}}` + "\n" +
			`{"jsonrpc":"2.0","id":"a","result":{"content":[]}}` + "\n",
			[]string{"request roots/list 1", "request notifications/message <nil>", "response a result"}, ""},
		{"an error response", `{"jsonrpc":"2.0","id":7,"error":{"code":-32000,"message":"no"}}` + "\n",
			[]string{"response 7 error -32000"}, ""},
		{"a batch", `[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":2,"result":{}}]` + "\n",
			[]string{"request a <nil>", "response 2 result"}, ""},
		{"a message over two lines, and CRLF", "{\"jsonrpc\":\"2.0\",\n\"method\":\"a\"}\r\n", []string{"request a <nil>"}, ""},
		{"an empty batch", "[]\n", nil, "empty batch"},
		{"another version", `{"jsonrpc":"1.0","method":"a"}` + "\n", nil, `version "1.0"`},
		{"a response without an id", `{"jsonrpc":"2.0","result":{}}` + "\n", nil, "neither a method nor an id"},
		{"an id that is an object", `{"jsonrpc":"2.0","id":{},"result":{}}` + "\n", nil, "a message from the child"},
		{"not JSON", "hello\n", nil, "invalid character"},
		{"a message over the limit", `{"jsonrpc":"2.0","method":"` + strings.Repeat("x", 300) + `"}` + "\n", nil, errFrameTooLarge.Error()},
		{"many messages, each under the limit", strings.Repeat(`{"jsonrpc":"2.0","method":"`+strings.Repeat("x", 100)+`"}`+"\n", 5), []string{
			"request " + strings.Repeat("x", 100) + " <nil>", "request " + strings.Repeat("x", 100) + " <nil>", "request " + strings.Repeat("x", 100) + " <nil>",
			"request " + strings.Repeat("x", 100) + " <nil>", "request " + strings.Repeat("x", 100) + " <nil>"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &pipeConn{incoming: make(chan pipeRead), closed: make(chan struct{})}
			go c.read(&frameLimit{r: strings.NewReader(tt.output), max: 256})
			var got []string
			var err error
			for {
				var msg jsonrpc.Message
				if msg, err = c.Read(context.Background()); err != nil {
					break
				}
				switch m := msg.(type) {
				case *jsonrpc.Request:
					got = append(got, fmt.Sprintf("request %s %v", m.Method, m.ID.Raw()))
				case *jsonrpc.Response:
					if m.Error != nil {
						var we *jsonrpc.Error
						errors.As(m.Error, &we)
						got = append(got, fmt.Sprintf("response %v error %d", m.ID.Raw(), we.Code))
					} else {
						got = append(got, fmt.Sprintf("response %v result", m.ID.Raw()))
					}
				}
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("read %q, want %q", got, tt.want)
			}
			if tt.err == "" && !errors.Is(err, io.EOF) || tt.err != "" && !strings.Contains(err.Error(), tt.err) {
				t.Errorf("reading ended with %v, want %q", err, tt.err)
			}
		})
	}
}

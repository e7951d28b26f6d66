package roster_test

import (
	"fmt"

	"github.com/interlock-mcp/interlock/roster"
)

// Three replicas, one of which missed a reload.
func ExampleDrift() {
	gws := []roster.Gateway{
		{ID: "a1", Version: "v0.2.0", ConfigDigest: "9f2c41d07be35a11"},
		{ID: "b2", Version: "v0.2.0", ConfigDigest: "9f2c41d07be35a11"},
		{ID: "c3", Version: "v0.2.0", ConfigDigest: "04ee7a1c9d2b8f60"},
	}
	fmt.Println(roster.Drift(gws))
	fmt.Printf("%q\n", roster.Drift(gws[:2]))
	// Output:
	// config digests differ: 9f2c41d07be3 (a1, b2), 04ee7a1c9d2b (c3)
	// ""
}

func ExampleConsoleURL() {
	gws := []roster.Gateway{
		{ID: "stdio1", Version: "v0.2.0"},
		{ID: "http1", Version: "v0.2.0", ConsoleURL: "http://127.0.0.1:8740"},
	}
	fmt.Println(roster.ConsoleURL(gws))
	// Output: http://127.0.0.1:8740
}

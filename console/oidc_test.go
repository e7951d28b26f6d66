package console

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// TestSignInFlows: a sign-in under way is taken once, not after its ten
// minutes, and no more than maxFlows wait at once.
func TestSignInFlows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := oidcFlows{byKey: map[string]oidcFlow{}}
		fs.put("a", oidcFlow{nonce: "n", expires: time.Now().Add(flowTTL)})
		fs.put("b", oidcFlow{nonce: "n", expires: time.Now().Add(flowTTL)})
		if f, ok := fs.take("a"); !ok || f.nonce != "n" {
			t.Fatalf("take a = %+v, %v", f, ok)
		}
		if _, ok := fs.take("a"); ok {
			t.Error("a was taken twice")
		}
		time.Sleep(flowTTL + time.Second)
		if _, ok := fs.take("b"); ok {
			t.Error("b was taken after it expired")
		}
		for i := range maxFlows {
			if !fs.put(fmt.Sprint(i), oidcFlow{expires: time.Now().Add(flowTTL)}) {
				t.Fatalf("flow %d refused", i)
			}
		}
		if fs.put("one-more", oidcFlow{expires: time.Now().Add(flowTTL)}) {
			t.Error("a flow beyond maxFlows was kept")
		}
		time.Sleep(flowTTL + time.Second)
		if !fs.put("later", oidcFlow{expires: time.Now().Add(flowTTL)}) {
			t.Error("expired flows still fill the table")
		}
	})
}

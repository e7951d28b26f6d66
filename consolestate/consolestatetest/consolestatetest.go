// Package consolestatetest checks that a store keeps the console's state
// as package consolestate says: a session lives until it idles out or
// ends, and is seen alike from every handle; what a session's slot holds,
// and a one-time link, are taken exactly once; a passkey's revision moves
// by one swap at a time, so of two replicas checking one signature
// counter at once only one moves it; and a signal raised on one handle is
// heard on the others.
//
// Every race runs from two handles on one store, as two gateways sharing
// it would, so a store that serialises only within one handle fails.
package consolestatetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/consolestate"
	"github.com/interlock-mcp/interlock/internal/testproc"
)

// Open returns two handles on one fresh, empty store (two gateways
// sharing it); they may be the same value for a store of one process.
type Open func(t *testing.T) (consolestate.Store, consolestate.Store)

// OpenSignal returns two handles on one fresh signal.
type OpenSignal func(t *testing.T) (consolestate.Signal, consolestate.Signal)

// The time the cases start at; stores take their times from the caller.
var start = time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)

const idle = 30 * time.Minute

var (
	bob   = approval.Identity{Tenant: "acme", Principal: "bob", Groups: []string{"finance", "ops"}}
	other = approval.Identity{Tenant: "other", Principal: "bob"}
)

func session(who approval.Identity, at time.Time) consolestate.Session {
	return consolestate.Session{Who: who, CSRF: "csrf-of-" + who.Principal, Created: at, LastSeen: at,
		Credential: consolestate.Credential{Kind: "key", Ref: "sha-of-key", Expires: at.Add(8 * time.Hour)}}
}

// Run runs the store's conformance tests.
func Run(t *testing.T, open Open) {
	t.Run("sessions", func(t *testing.T) { runSessions(t, open) })
	t.Run("slots", func(t *testing.T) { runSlots(t, open) })
	t.Run("passkeys", func(t *testing.T) { runPasskeys(t, open) })
	t.Run("links", func(t *testing.T) { runLinks(t, open) })
}

// started opens two handles and starts bob's session on the first.
func started(t *testing.T, open Open) (consolestate.Store, consolestate.Store, string) {
	t.Helper()
	s, r := open(t)
	key := consolestate.Key("session-id")
	if err := s.StartSession(context.Background(), key, session(bob, start), idle); err != nil {
		t.Fatal(err)
	}
	return s, r, key
}

// check is one case of a table: what run returns must equal want.
type check[T comparable] struct {
	name string
	run  func(t *testing.T) T
	want T
}

func runChecks[T comparable](t *testing.T, checks []check[T]) {
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if got := c.run(t); got != c.want {
				t.Errorf("got %#v, want %#v", got, c.want)
			}
		})
	}
}

func runSessions(t *testing.T, open Open) {
	ctx := context.Background()
	live := func(t *testing.T, s consolestate.Store, key string, now time.Time, touch bool) bool {
		t.Helper()
		got, err := s.Session(ctx, key, now, idle, touch)
		if errors.Is(err, consolestate.ErrNoSession) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		want := session(bob, start)
		if touch {
			want.LastSeen = now
		}
		if got.Who.Tenant != want.Who.Tenant || got.Who.Principal != want.Who.Principal || !slices.Equal(got.Who.Groups, want.Who.Groups) ||
			got.Credential.Kind != want.Credential.Kind || got.Credential.Ref != want.Credential.Ref ||
			!got.Credential.Expires.Equal(want.Credential.Expires) || got.CSRF != want.CSRF || !got.Created.Equal(want.Created) {
			t.Fatalf("the session read back is %+v, want %+v", got, want)
		}
		return true
	}
	runChecks(t, []check[bool]{
		{"a started session is live on the other handle", func(t *testing.T) bool {
			_, r, key := started(t, open)
			return live(t, r, key, start, false)
		}, true},
		{"a key never kept names no session", func(t *testing.T) bool {
			s, _, _ := started(t, open)
			return live(t, s, consolestate.Key("made-up"), start, false)
		}, false},
		{"live until its idle time is up", func(t *testing.T) bool {
			_, r, key := started(t, open)
			return live(t, r, key, start.Add(idle), false)
		}, true},
		{"idled out a nanosecond later", func(t *testing.T) bool {
			_, r, key := started(t, open)
			return live(t, r, key, start.Add(idle+time.Nanosecond), false)
		}, false},
		{"once idled out it stays ended", func(t *testing.T) bool {
			s, r, key := started(t, open)
			live(t, r, key, start.Add(idle+time.Nanosecond), false)
			return live(t, s, key, start, false)
		}, false},
		{"a touch keeps it live from then", func(t *testing.T) bool {
			s, r, key := started(t, open)
			live(t, s, key, start.Add(20*time.Minute), true)
			return live(t, r, key, start.Add(20*time.Minute+idle), false)
		}, true},
		{"a touch from an earlier request does not move it back", func(t *testing.T) bool {
			s, r, key := started(t, open)
			live(t, s, key, start.Add(20*time.Minute), true)
			if _, err := r.Session(ctx, key, start.Add(10*time.Minute), idle, true); err != nil {
				t.Fatal(err)
			}
			return live(t, s, key, start.Add(20*time.Minute+idle), false)
		}, true},
		{"a read without a touch does not", func(t *testing.T) bool {
			s, r, key := started(t, open)
			live(t, s, key, start.Add(20*time.Minute), false)
			return live(t, r, key, start.Add(idle+time.Second), false)
		}, false},
		{"ended on one handle, gone on the other", func(t *testing.T) bool {
			s, r, key := started(t, open)
			if err := s.EndSession(ctx, key); err != nil {
				t.Fatal(err)
			}
			if err := r.EndSession(ctx, key); err != nil {
				t.Fatalf("ending an ended session: %v", err)
			}
			return live(t, r, key, start, false)
		}, false},
		{"a new session drops those idled out", func(t *testing.T) bool {
			s, r, key := started(t, open)
			if err := r.StartSession(ctx, consolestate.Key("later"), session(other, start.Add(idle+time.Second)), idle); err != nil {
				t.Fatal(err)
			}
			all, err := s.Sessions(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, kept := all[key]
			return kept || len(all) != 1
		}, false},
		{"every session is listed", func(t *testing.T) bool {
			s, r, key := started(t, open)
			if err := r.StartSession(ctx, consolestate.Key("another"), session(other, start), idle); err != nil {
				t.Fatal(err)
			}
			all, err := s.Sessions(ctx)
			if err != nil {
				t.Fatal(err)
			}
			b, o := all[key], all[consolestate.Key("another")]
			return len(all) == 2 && b.Who.Is(bob) && o.Who.Is(other) && b.CSRF == "csrf-of-bob"
		}, true},
	})
}

func runSlots(t *testing.T, open Open) {
	ctx := context.Background()
	take := func(t *testing.T, s consolestate.Store, key string, slot consolestate.Slot) string {
		t.Helper()
		v, err := s.Take(ctx, key, slot)
		if err != nil {
			t.Fatal(err)
		}
		return string(v)
	}
	put := func(t *testing.T, s consolestate.Store, key string, slot consolestate.Slot, v string) {
		t.Helper()
		if err := s.Put(ctx, key, slot, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	// Each step puts value in slot on the first handle or the second, or
	// takes it (an empty value); what the takes got is joined by "|".
	type step struct {
		second bool
		slot   consolestate.Slot
		value  string
	}
	flash, reg := consolestate.Flash, consolestate.Registration
	steps := []struct {
		name  string
		steps []step
		want  string
	}{
		{"what one handle puts the other takes", []step{{false, flash, "You approved it."}, {true, flash, ""}}, "You approved it."},
		{"taken once", []step{{false, flash, "once"}, {true, flash, ""}, {false, flash, ""}}, "once|"},
		{"a later put replaces an earlier one", []step{{false, reg, "first challenge"}, {true, reg, "second challenge"}, {false, reg, ""}},
			"second challenge"},
		{"slots are apart", []step{{false, reg, "challenge"}, {false, flash, "flash"}, {true, flash, ""}, {true, reg, ""}}, "flash|challenge"},
	}
	for _, tt := range steps {
		t.Run(tt.name, func(t *testing.T) {
			s, r, key := started(t, open)
			var took []string
			for _, st := range tt.steps {
				h := s
				if st.second {
					h = r
				}
				if st.value != "" {
					put(t, h, key, st.slot, st.value)
				} else {
					took = append(took, take(t, h, key, st.slot))
				}
			}
			if got := strings.Join(took, "|"); got != tt.want {
				t.Errorf("took %q, want %q", got, tt.want)
			}
		})
	}
	runChecks(t, []check[string]{
		{"a session's slots are its own", func(t *testing.T) string {
			s, r, key := started(t, open)
			if err := s.StartSession(ctx, consolestate.Key("another"), session(other, start), idle); err != nil {
				t.Fatal(err)
			}
			put(t, s, key, consolestate.Flash, "bob's")
			return take(t, r, consolestate.Key("another"), consolestate.Flash)
		}, ""},
		{"an ended session's slots go with it", func(t *testing.T) string {
			s, r, key := started(t, open)
			put(t, s, key, consolestate.Flash, "left behind")
			if err := s.EndSession(ctx, key); err != nil {
				t.Fatal(err)
			}
			if err := s.StartSession(ctx, key, session(bob, start), idle); err != nil {
				t.Fatal(err)
			}
			return take(t, r, key, consolestate.Flash)
		}, ""},
		{"a put on a session that is gone", func(t *testing.T) string {
			s, _, _ := started(t, open)
			return fmt.Sprint(errors.Is(s.Put(ctx, consolestate.Key("gone"), consolestate.Flash, []byte("x")), consolestate.ErrNoSession))
		}, "true"},
		{"a slot that does not exist", func(t *testing.T) string {
			s, _, key := started(t, open)
			_, err := s.Take(ctx, key, "password")
			return fmt.Sprint(err != nil && s.Put(ctx, key, "password", []byte("x")) != nil)
		}, "true"},
	})
	t.Run("of takes at once on two handles, one gets the value", func(t *testing.T) {
		s, r, key := started(t, open)
		for round := range 20 {
			put(t, s, key, consolestate.Registration, fmt.Sprint("challenge ", round))
			got := testproc.AtOnce(t, 8, s, r, func(h consolestate.Store, _ int) (bool, error) {
				v, err := h.Take(ctx, key, consolestate.Registration)
				return v != nil, err
			})
			if got != 1 {
				t.Fatalf("round %d: %d takes got the challenge", round, got)
			}
		}
	})
}

func runPasskeys(t *testing.T, open Open) {
	ctx := context.Background()
	bobs, others := consolestate.OwnerOf(bob), consolestate.OwnerOf(other)
	key := func(id string) consolestate.Passkey {
		return consolestate.Passkey{ID: []byte(id), RPID: "localhost", Origin: "http://localhost:8740",
			Credential: []byte(`{"id":"` + id + `","authenticator":{"signCount":5}}`), Accepted: [][32]byte{{1, 2, 3}}}
	}
	add := func(t *testing.T, s consolestate.Store, o consolestate.Owner, p consolestate.Passkey) {
		t.Helper()
		if err := s.AddPasskey(ctx, o, p); err != nil {
			t.Fatal(err)
		}
	}
	list := func(t *testing.T, s consolestate.Store, o consolestate.Owner) []consolestate.Passkey {
		t.Helper()
		keys, err := s.Passkeys(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	t.Run("one user handle per owner, whoever asks first", func(t *testing.T) {
		s, r := open(t)
		first, err := s.PasskeyUser(ctx, bobs, []byte("handle-1"))
		if err != nil {
			t.Fatal(err)
		}
		again, err := r.PasskeyUser(ctx, bobs, []byte("handle-2"))
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := r.PasskeyUser(ctx, others, []byte("handle-3"))
		if err != nil {
			t.Fatal(err)
		}
		if string(first) != "handle-1" || string(again) != "handle-1" || string(theirs) != "handle-3" {
			t.Errorf("handles %q %q %q", first, again, theirs)
		}
	})
	t.Run("a passkey added on one handle reads back on the other", func(t *testing.T) {
		s, r := open(t)
		add(t, s, bobs, key("k1"))
		add(t, s, bobs, key("k2"))
		got := list(t, r, bobs)
		if len(got) != 2 {
			t.Fatalf("%d passkeys", len(got))
		}
		for i, id := range []string{"k1", "k2"} {
			want := key(id)
			g := got[i]
			if string(g.ID) != id || g.RPID != want.RPID || g.Origin != want.Origin || !bytes.Equal(g.Credential, want.Credential) ||
				!slices.Equal(g.Accepted, want.Accepted) || g.Rev != 1 {
				t.Errorf("passkey %d read back as %+v", i, g)
			}
		}
		if n := len(list(t, r, others)); n != 0 {
			t.Errorf("the same principal of another tenant has %d passkeys", n)
		}
	})
	t.Run("one credential id once per owner", func(t *testing.T) {
		s, r := open(t)
		add(t, s, bobs, key("k1"))
		if err := r.AddPasskey(ctx, bobs, key("k1")); !errors.Is(err, consolestate.ErrPasskeyExists) {
			t.Errorf("added twice: %v", err)
		}
		add(t, r, others, key("k1"))
	})
	t.Run("a swap from the revision read moves it; one from an older does not", func(t *testing.T) {
		s, r := open(t)
		add(t, s, bobs, key("k1"))
		p := list(t, r, bobs)[0]
		moved := p
		moved.Credential = []byte(`{"authenticator":{"signCount":6}}`)
		moved.Accepted = append(moved.Accepted, [32]byte{4})
		if ok, err := r.SwapPasskey(ctx, bobs, moved); !ok || err != nil {
			t.Fatalf("first swap: %v %v", ok, err)
		}
		if ok, err := s.SwapPasskey(ctx, bobs, moved); ok || err != nil {
			t.Fatalf("a swap from the old revision: %v %v", ok, err)
		}
		got := list(t, s, bobs)[0]
		if got.Rev != 2 || string(got.Credential) != `{"authenticator":{"signCount":6}}` || len(got.Accepted) != 2 {
			t.Errorf("after the swap: %+v", got)
		}
		if _, err := s.SwapPasskey(ctx, bobs, key("k9")); !errors.Is(err, consolestate.ErrNoPasskey) {
			t.Errorf("swapping a passkey never added: %v", err)
		}
	})
	t.Run("of swaps at once from one revision on two handles, one wins", func(t *testing.T) {
		s, r := open(t)
		add(t, s, bobs, key("k1"))
		for round := range 20 {
			p := list(t, s, bobs)[0]
			got := testproc.AtOnce(t, 8, s, r, func(h consolestate.Store, _ int) (bool, error) {
				next := p
				next.Credential = []byte(fmt.Sprintf(`{"round":%d}`, round))
				return h.SwapPasskey(ctx, bobs, next)
			})
			if got != 1 {
				t.Fatalf("round %d: %d swaps from revision %d won", round, got, p.Rev)
			}
		}
		if rev := list(t, r, bobs)[0].Rev; rev != 21 {
			t.Errorf("revision %d after 20 rounds, want 21", rev)
		}
	})
	t.Run("owners are listed and forgotten one by one", func(t *testing.T) {
		s, r := open(t)
		add(t, s, bobs, key("k1"))
		add(t, s, others, key("k2"))
		if _, err := s.PasskeyUser(ctx, bobs, []byte("old-handle")); err != nil {
			t.Fatal(err)
		}
		owners, err := r.PasskeyOwners(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(owners) != 2 || !slices.Contains(owners, bobs) || !slices.Contains(owners, others) {
			t.Fatalf("owners %v", owners)
		}
		if err := r.ForgetPasskeys(ctx, bobs); err != nil {
			t.Fatal(err)
		}
		if n, m := len(list(t, s, bobs)), len(list(t, s, others)); n != 0 || m != 1 {
			t.Errorf("after forgetting bob: %d of his passkeys, %d of the other tenant's bob", n, m)
		}
		if owners, _ := s.PasskeyOwners(ctx); len(owners) != 1 || owners[0] != others {
			t.Errorf("owners after forgetting %v", owners)
		}
		if h, err := s.PasskeyUser(ctx, bobs, []byte("new-handle")); err != nil || string(h) != "new-handle" {
			t.Errorf("bob's handle after forgetting: %q %v", h, err)
		}
	})
}

func runLinks(t *testing.T, open Open) {
	ctx := context.Background()
	operator := approval.Identity{Tenant: "local", Principal: "operator", Groups: []string{"ops"}}
	added := func(t *testing.T, expires time.Time) (consolestate.Store, consolestate.Store, string) {
		t.Helper()
		s, r := open(t)
		key := consolestate.Key("link-token")
		if err := s.AddLink(ctx, key, operator, expires); err != nil {
			t.Fatal(err)
		}
		return s, r, key
	}
	spend := func(t *testing.T, s consolestate.Store, key string, now time.Time) bool {
		t.Helper()
		who, ok, err := s.SpendLink(ctx, key, now)
		if err != nil {
			t.Fatal(err)
		}
		if ok && (!who.Is(operator) || !slices.Equal(who.Groups, operator.Groups)) {
			t.Fatalf("the link signs in %+v", who)
		}
		return ok
	}
	runChecks(t, []check[bool]{
		{"a link added on one handle is spent on the other", func(t *testing.T) bool {
			_, r, key := added(t, start.Add(time.Hour))
			return spend(t, r, key, start)
		}, true},
		{"spent once", func(t *testing.T) bool {
			s, r, key := added(t, start.Add(time.Hour))
			spend(t, r, key, start)
			return spend(t, s, key, start)
		}, false},
		{"live until a nanosecond before it expires", func(t *testing.T) bool {
			_, r, key := added(t, start.Add(time.Hour))
			return spend(t, r, key, start.Add(time.Hour-time.Nanosecond))
		}, true},
		{"expired", func(t *testing.T) bool {
			_, r, key := added(t, start.Add(time.Hour))
			return spend(t, r, key, start.Add(time.Hour))
		}, false},
		{"a token never added", func(t *testing.T) bool {
			_, r, _ := added(t, start.Add(time.Hour))
			return spend(t, r, consolestate.Key("made-up"), start)
		}, false},
	})
	t.Run("of spends at once on two handles, one signs in", func(t *testing.T) {
		s, r := open(t)
		for round := range 20 {
			key := consolestate.Key(fmt.Sprint("token ", round))
			if err := s.AddLink(ctx, key, operator, start.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			got := testproc.AtOnce(t, 8, s, r, func(h consolestate.Store, _ int) (bool, error) {
				_, ok, err := h.SpendLink(ctx, key, start)
				return ok, err
			})
			if got != 1 {
				t.Fatalf("round %d: the link signed in %d times", round, got)
			}
		}
	})
}

// HearsAfterGap checks a listener whose connection to the store was lost:
// heard, a channel of s.Listen, receives "" to say it may have missed
// words, and then, within the time given, hears a word raised after that.
// It raises the word only once the gap has been told.
func HearsAfterGap(t *testing.T, s consolestate.Signal, heard <-chan string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	gap := false
	for {
		if gap {
			if err := s.Raise(t.Context(), "after"); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case w, ok := <-heard:
			switch {
			case !ok:
				t.Fatalf("the listener stopped (gap reported: %v)", gap)
			case w == "":
				gap = true
			case w == "after":
				if !gap {
					t.Fatal("heard a word after the gap without being told of the gap")
				}
				return
			}
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatalf("the listener did not hear again after the gap (gap reported: %v)", gap)
		}
	}
}

// RunSignal runs the signal's conformance tests, on real time: a word
// must arrive within five seconds.
func RunSignal(t *testing.T, open OpenSignal) {
	hear := func(t *testing.T, ch <-chan string, want string) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case got, ok := <-ch:
				if !ok {
					t.Fatalf("the channel closed before %q arrived", want)
				}
				if got == want {
					return
				}
			case <-deadline:
				t.Fatalf("%q did not arrive", want)
			}
		}
	}
	t.Run("a word raised on one handle is heard on both", func(t *testing.T) {
		s, r := open(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		there, err := r.Listen(ctx)
		if err != nil {
			t.Fatal(err)
		}
		here, err := s.Listen(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, what := range []string{"apr_1", "apr_2"} {
			if err := s.Raise(ctx, what); err != nil {
				t.Fatal(err)
			}
			hear(t, there, what)
			hear(t, here, what)
		}
	})
	t.Run("the channel closes when the listener is done", func(t *testing.T) {
		s, _ := open(t)
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := s.Listen(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					return
				}
			case <-deadline:
				t.Fatal("the channel is still open")
			}
		}
	})
}

package console

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/interlock-mcp/interlock"
	"github.com/interlock-mcp/interlock/approval"
	"github.com/interlock-mcp/interlock/consolestate"
)

// change is one thing that happened to an approval or a standing grant,
// in words a screen reader can announce.
type change struct {
	approval *approval.Approval
	grant    *approval.StandingGrant
	message  string
}

// watcher reads the approval and grant stores while pages listen and
// tells them what changed. Reading the stores, rather than hearing each
// decision, catches every path a decision takes (this console, REST, the
// command line, another replica), approvals that expire on their own and
// the calls a grant lets run. It reads them every poll, and at once when
// the signal says another replica (or this one) changed something.
type watcher struct {
	store  approval.Store
	grants approval.GrantStore
	signal consolestate.Signal
	poll   time.Duration
	log    *slog.Logger
	wake   chan struct{}
	// raise asks the raiser to send the signal.
	raise chan struct{}
	done  chan struct{}
	once  sync.Once

	mu   sync.Mutex
	subs map[chan change]struct{}
	// ready holds, for each subscription made since the last read of the
	// stores began, what to close when the next read is done.
	ready []chan struct{}
}

// seen is what the watcher remembers of an approval between two reads.
type seen struct {
	state string
	votes int
}

// snapshot is what the watcher knows of the stores after a read.
type snapshot struct {
	approvals map[string]seen
	grants    map[string]*approval.StandingGrant
}

func newWatcher(store approval.Store, grants approval.GrantStore, signal consolestate.Signal, poll time.Duration, log *slog.Logger) *watcher {
	w := &watcher{store: store, grants: grants, signal: signal, poll: poll, log: log, wake: make(chan struct{}, 1),
		raise: make(chan struct{}, 1), done: make(chan struct{}), subs: map[chan change]struct{}{}}
	go w.run()
	go w.raiser()
	return w
}

// changed wakes this watcher and, through the signal, every other
// replica's; it never blocks.
func (w *watcher) changed() {
	w.poke()
	select {
	case w.raise <- struct{}{}:
	default:
	}
}

// raiseTimeout bounds one raise of the signal: a store that does not
// answer delays the other replicas' pages until their next poll, never a
// decision.
const raiseTimeout = 5 * time.Second

// raiser sends the signal for changed, one raise for any number of
// changes made while the last was on its way.
func (w *watcher) raiser() {
	for {
		select {
		case <-w.done:
			return
		case <-w.raise:
		}
		ctx, cancel := context.WithTimeout(context.Background(), raiseTimeout)
		if err := w.signal.Raise(ctx, "changed"); err != nil {
			w.log.Warn("console: telling the other gateways of a change", "error", err)
		}
		cancel()
	}
}

func (w *watcher) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watcher) close() { w.once.Do(func() { close(w.done) }) }

// subscribe returns a channel of changes; it is closed when the watcher
// stops. ready is closed once the watcher has read the stores since the
// subscription: a watcher that had no listener compares with that first
// read, so a change made before ready may go unreported. cancel ends the
// subscription.
func (w *watcher) subscribe() (changes <-chan change, ready <-chan struct{}, cancel func()) {
	ch := make(chan change, 16)
	r := make(chan struct{})
	w.mu.Lock()
	select {
	case <-w.done:
		close(ch)
		close(r)
		w.mu.Unlock()
		return ch, r, func() {}
	default:
	}
	w.subs[ch] = struct{}{}
	w.ready = append(w.ready, r)
	w.mu.Unlock()
	w.poke()
	return ch, r, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.subs[ch]; ok {
			delete(w.subs, ch)
			close(ch)
		}
	}
}

func (w *watcher) listening() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.subs) > 0
}

// publish hands c to every subscriber; one that is too slow misses it and
// catches up with the next, since every change refreshes the whole page.
func (w *watcher) publish(c change) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.subs {
		select {
		case ch <- c:
		default:
		}
	}
}

// linger is how long the watcher keeps reading after the last page left:
// a browser moving from one page to the next has no stream open for a
// moment, and a change made then must still reach the next page.
const linger = 30 * time.Second

func (w *watcher) run() {
	t := time.NewTicker(w.poll)
	defer t.Stop()
	var known *snapshot
	var lastHeard time.Time
	// heard is the signal while pages listen, nil otherwise.
	var heard <-chan string
	stopHearing := func() {}
	// lastTried is when the watcher last tried to listen: a signal that
	// cannot be reached is tried again every hearRetry, not every poll.
	var lastTried time.Time
	defer func() { stopHearing() }()
	for {
		select {
		case <-w.done:
			w.mu.Lock()
			for ch := range w.subs {
				delete(w.subs, ch)
				close(ch)
			}
			for _, r := range w.ready {
				close(r)
			}
			w.ready = nil
			w.mu.Unlock()
			return
		case <-t.C:
		case <-w.wake:
		case _, ok := <-heard:
			if !ok {
				// The signal stopped; listen again at the next poll.
				heard = nil
				stopHearing()
			}
		}
		if w.listening() {
			lastHeard = time.Now()
			if heard == nil && time.Since(lastTried) >= hearRetry {
				lastTried = time.Now()
				heard, stopHearing = w.hear()
			}
		} else if time.Since(lastHeard) > linger {
			known = nil
			stopHearing()
			heard, stopHearing = nil, func() {}
			continue
		}
		w.mu.Lock()
		ready := w.ready
		w.ready = nil
		w.mu.Unlock()
		next, changes, err := w.read(context.Background(), known)
		// A page waits for this read even when it failed: it listens, and
		// hears what changes once the stores answer again.
		for _, r := range ready {
			close(r)
		}
		if err != nil {
			w.log.Warn("console: reading approvals and grants", "error", err)
			continue
		}
		known = next
		for _, c := range changes {
			w.publish(c)
		}
	}
}

// hearRetry is how long the watcher waits before it tries again to
// listen to a signal it could not reach.
const hearRetry = 5 * time.Second

// hear listens to the signal; on failure it returns nil, and the watcher
// reads the stores every poll until it listens again.
func (w *watcher) hear() (<-chan string, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := w.signal.Listen(ctx)
	if err != nil {
		cancel()
		w.log.Warn("console: listening for other gateways' changes", "error", err)
		return nil, func() {}
	}
	return ch, cancel
}

// read compares the stores with what was known and returns what they hold
// now and what changed. The first read (known nil) reports nothing.
func (w *watcher) read(ctx context.Context, known *snapshot) (*snapshot, []change, error) {
	var was snapshot
	if known != nil {
		was = *known
	}
	approvals, changes, err := w.readApprovals(ctx, was.approvals, known == nil)
	if err != nil {
		return nil, nil, err
	}
	grants, grantChanges, err := w.readGrants(ctx, was.grants, known == nil)
	if err != nil {
		return nil, nil, err
	}
	return &snapshot{approvals: approvals, grants: grants}, append(changes, grantChanges...), nil
}

// readApprovals is read's half for approvals. Approved approvals stay
// watched until they are used.
func (w *watcher) readApprovals(ctx context.Context, known map[string]seen, first bool) (map[string]seen, []change, error) {
	pending, err := w.store.List(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("listing approvals: %w", err)
	}
	now := time.Now()
	current := map[string]*approval.Approval{}
	for _, a := range pending {
		current[a.ID] = a
	}
	for id := range known {
		if current[id] != nil {
			continue
		}
		a, err := w.store.Get(ctx, id)
		if err != nil {
			continue
		}
		current[id] = a
	}
	next := map[string]seen{}
	var changes []change
	for id, a := range current {
		is := seen{state: a.State(now), votes: len(a.Approvals)}
		was, ok := known[id]
		if is.state == approval.Pending || is.state == approval.Approved {
			next[id] = is
		}
		if first || (ok && was == is) {
			continue
		}
		changes = append(changes, change{approval: a, message: describe(a, is, ok)})
	}
	return next, changes, nil
}

// readGrants is read's half for standing grants: a new one, a use, and
// the end of one (revoked, used up or expired).
func (w *watcher) readGrants(ctx context.Context, known map[string]*approval.StandingGrant, first bool) (map[string]*approval.StandingGrant, []change, error) {
	if w.grants == nil {
		return nil, nil, nil
	}
	live, err := w.grants.LiveGrants(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("listing grants: %w", err)
	}
	next := make(map[string]*approval.StandingGrant, len(live))
	var changes []change
	for _, sg := range live {
		next[sg.ID] = sg
		was, ok := known[sg.ID]
		switch {
		case first || (ok && was.Used == sg.Used):
		case !ok:
			changes = append(changes, change{grant: sg, message: fmt.Sprintf("%s granted %s's calls of %s: %d uses until %s.",
				sg.GrantedBy, sg.Principal, sg.Tool, sg.Uses, sg.ExpiresAt.UTC().Format("15:04 UTC"))})
		default:
			changes = append(changes, change{grant: sg, message: fmt.Sprintf("%s's call of %s ran under %s's grant (%d of %d uses).",
				sg.Principal, sg.Tool, sg.GrantedBy, sg.Used, sg.Uses)})
		}
	}
	for id, was := range known {
		if next[id] != nil {
			continue
		}
		end := "expired"
		if sg, err := w.grants.Grant(ctx, id); err == nil {
			switch {
			case sg.Revoked:
				end = "was revoked"
			case sg.Used >= sg.Uses:
				end = "has no uses left"
			}
			was = sg
		}
		changes = append(changes, change{grant: was, message: fmt.Sprintf("The grant of %s to %s %s.", was.Tool, was.Principal, end)})
	}
	for i := range changes {
		changes[i].message = oneLine(changes[i].message)
	}
	return next, changes, nil
}

// describe says in one line what became of a.
func describe(a *approval.Approval, is seen, known bool) string {
	voters := make([]string, len(a.Approvals))
	for i, v := range a.Approvals {
		voters[i] = v.Principal
	}
	var msg string
	switch {
	case !known && is.state == approval.Pending:
		msg = fmt.Sprintf("New approval waiting: %s, called by %s.", a.Tool, a.Principal)
	case is.state == approval.Pending:
		msg = fmt.Sprintf("%s approved %s (%d of %d).", voters[len(voters)-1], a.Tool, len(voters), a.Quorum)
	case is.state == approval.Approved:
		msg = fmt.Sprintf("%s is approved by %s; it runs when %s calls it again.", a.Tool, strings.Join(voters, ", "), a.Principal)
	case is.state == approval.Denied:
		msg = fmt.Sprintf("%s denied %s.", a.Denial.Principal, a.Tool)
	case is.state == approval.Expired:
		msg = fmt.Sprintf("Nobody decided %s in time; the approval expired.", a.Tool)
	default:
		msg = fmt.Sprintf("%s ran, approved by %s.", a.Tool, strings.Join(voters, ", "))
	}
	return oneLine(msg)
}

// oneLine keeps msg to one event line: names come from configuration and
// keys, but a line break would end the event early.
func oneLine(msg string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(msg) }

// visibleTo reports whether who may learn of the change: of an approval
// or a grant they may see ([approval.MaySee]).
func (ch change) visibleTo(who interlock.Identity) bool {
	if ch.grant != nil {
		return approval.MaySee(who, ch.grant.Subject())
	}
	return approval.MaySee(who, ch.approval.Subject())
}

func isCaller(a *approval.Approval, who interlock.Identity) bool {
	return who.Is(interlock.Identity{Tenant: a.Tenant, Principal: a.Principal})
}

// stillSignedIn reports whether the session of r's cookie is still
// signed in and stands on its credential: one signed out or idled out on
// any replica, or a store that is away, ends the stream.
func (c *Console) stillSignedIn(r *http.Request) bool {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return false
	}
	s, err := c.session(r.Context(), ck.Value, false)
	return err == nil && s != nil && c.stands(r.Context(), s)
}

// heartbeat keeps idle streams open through proxies and notices sessions
// that ended.
const heartbeat = 20 * time.Second

// events streams the changes the approver may see as server-sent events.
func (c *Console) events(w http.ResponseWriter, r *http.Request, s *session) {
	rc := http.NewResponseController(w)
	// A page listens for as long as it is open.
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	changes, ready, cancel := c.changes.subscribe()
	defer cancel()
	ended, release := c.endings.of(s.key)
	defer release()
	// The page is told it listens only once a change can no longer be
	// missed.
	select {
	case <-ready:
	case <-r.Context().Done():
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 3000\n: listening\n\n"); err != nil {
		return
	}
	_ = rc.Flush()
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	for {
		var err error
		select {
		case <-r.Context().Done():
			return
		case <-ended:
			// Signed out, idled out, or its credential fell: the stream
			// tells nothing more.
			return
		case ch, ok := <-changes:
			if !ok {
				return
			}
			if !ch.visibleTo(s.who) {
				continue
			}
			// A session signed out on another replica hears nothing more.
			if !c.stillSignedIn(r) {
				return
			}
			_, err = fmt.Fprintf(w, "event: change\ndata: %s\n\n", ch.message)
		case <-beat.C:
			if !c.stillSignedIn(r) {
				return
			}
			_, err = fmt.Fprint(w, ": still here\n\n")
		}
		if err != nil {
			return
		}
		_ = rc.Flush()
	}
}

package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/interlock-mcp/interlock/consolestate"
	"github.com/interlock-mcp/interlock/consolestate/sqlstore"
)

// consoleSchema keeps the console's state ([consolestate.Store]) in the
// state file, as package sqlstore lays it out, so every gateway on the
// data directory signs in the same approvers, and [consolestate.Signal]'s
// words, a row each.
var consoleSchema = sqlstore.SQLite.ConsoleSchema() + `
CREATE TABLE IF NOT EXISTS console_signals (
	seq  INTEGER PRIMARY KEY AUTOINCREMENT,
	what TEXT NOT NULL,
	at   INTEGER NOT NULL
);
`

// Console keeps the console's state in the state file, written and read
// by package sqlstore, and carries the signal that approvals changed
// between the processes on the data directory: a row per word, which
// listeners poll for (every [Console.Poll]) and which are dropped a
// minute after.
type Console struct {
	*handle
	*sqlstore.Console
	// Poll is how often a listener reads the words raised since its last
	// read; 100 ms when zero.
	Poll time.Duration
}

var (
	_ consolestate.Store  = (*Console)(nil)
	_ consolestate.Signal = (*Console)(nil)
)

// newConsole returns the console's state on h.
func newConsole(h *handle) *Console {
	return &Console{handle: h, Console: sqlstore.NewConsole(newDatabase(h), sqlstore.SQLite, "sqlite state "+h.path)}
}

// Console returns the console's state in s.
func (s *State) Console() *Console { return s.console }

func (s *Console) fail(doing string, err error) error {
	return fmt.Errorf("sqlite state %s: %s: %w", s.path, doing, err)
}

// signalKept is how long a raised word stays in the file for listeners
// to read.
const signalKept = time.Minute

// Raise implements [consolestate.Signal].
func (s *Console) Raise(ctx context.Context, what string) error {
	err := s.change(ctx, func(c *sql.Conn, now time.Time) error {
		if _, err := c.ExecContext(ctx, "DELETE FROM console_signals WHERE at < ?", now.Add(-signalKept).UnixNano()); err != nil {
			return err
		}
		_, err := c.ExecContext(ctx, "INSERT INTO console_signals (what, at) VALUES (?, ?)", what, now.UnixNano())
		return err
	})
	if err != nil {
		return s.fail("raising a console signal", err)
	}
	return nil
}

// Listen implements [consolestate.Signal]: it reads the words raised
// after the last one it read, every Poll. A read that fails, or finds the
// words after its last dropped, is a gap: it sends "".
func (s *Console) Listen(ctx context.Context) (<-chan string, error) {
	var last int64
	if err := s.db.QueryRowContext(ctx, "SELECT coalesce(max(seq), 0) FROM console_signals").Scan(&last); err != nil {
		return nil, s.fail("listening for console signals", err)
	}
	poll := s.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		t := time.NewTicker(poll)
		defer t.Stop()
		gap := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			words, next, err := s.since(ctx, last)
			if err != nil {
				gap = true
				continue
			}
			if len(words) > 0 && next-int64(len(words)) != last {
				gap = true
			}
			last = next
			if gap {
				words, gap = append([]string{""}, words...), false
			}
			for _, w := range words {
				if !consolestate.Send(ctx, ch, w) {
					return
				}
			}
		}
	}()
	return ch, nil
}

// since returns the words raised after seq, and the seq of the last.
func (s *Console) since(ctx context.Context, seq int64) ([]string, int64, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT seq, what FROM console_signals WHERE seq > ? ORDER BY seq", seq)
	if err != nil {
		return nil, seq, err
	}
	defer rows.Close()
	var words []string
	for rows.Next() {
		var w string
		if err := rows.Scan(&seq, &w); err != nil {
			return nil, seq, err
		}
		words = append(words, w)
	}
	return words, seq, rows.Err()
}

package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/interlock-mcp/interlock/consolestate"
	"github.com/interlock-mcp/interlock/consolestate/sqlstore"
)

// Console keeps the console's state ([consolestate.Store]) in
// PostgreSQL, written and read by package sqlstore, and carries its
// signal ([consolestate.Signal]) with LISTEN/NOTIFY, so that any replica
// sharing the database answers any of an approver's requests.
type Console struct {
	*sqlstore.Console
	pool  *pgxpool.Pool
	where string
	// channel is the NOTIFY channel of the schema the tables are in:
	// notifications are the database's, and two schemas are two stores.
	channel string
}

var (
	_ consolestate.Store  = (*Console)(nil)
	_ consolestate.Signal = (*Console)(nil)
)

// Console returns the console's state in the approvals' database, on
// their connections.
func (s *Approvals) Console() *Console {
	console := sqlstore.NewConsole(newDatabase(s.pool), sqlstore.PostgreSQL, "console store "+s.where)
	return &Console{Console: console, pool: s.pool, where: s.where, channel: s.channel}
}

// channelOf is the NOTIFY channel of schema: a hash, since a channel is
// an identifier of at most 63 bytes.
func channelOf(schema string) string {
	sum := sha256.Sum256([]byte(schema))
	return "interlock_console_" + hex.EncodeToString(sum[:8])
}

func (s *Console) fail(doing string, err error) error {
	return fmt.Errorf("console store %s: %s: %w", s.where, doing, err)
}

// Raise implements [consolestate.Signal].
func (s *Console) Raise(ctx context.Context, what string) error {
	if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", s.channel, what); err != nil {
		return s.fail("raising a console signal", err)
	}
	return nil
}

// Listen implements [consolestate.Signal]: LISTEN on a connection of its
// own, outside the pool. It returns once listening, so a word raised
// after it is heard. When the connection drops it connects again, and
// reports the gap with "".
func (s *Console) Listen(ctx context.Context) (<-chan string, error) {
	conn, err := s.listen(ctx)
	if err != nil {
		return nil, s.fail("listening for console signals", err)
	}
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		for {
			for conn != nil {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					conn.Close(context.WithoutCancel(ctx))
					conn = nil
					break
				}
				if !consolestate.Send(ctx, ch, n.Payload) {
					conn.Close(context.WithoutCancel(ctx))
					return
				}
			}
			if ctx.Err() != nil {
				return
			}
			select {
			case <-time.After(250 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			if conn, _ = s.listen(ctx); conn != nil && !consolestate.Send(ctx, ch, "") {
				conn.Close(context.WithoutCancel(ctx))
				return
			}
		}
	}()
	return ch, nil
}

// listen opens a connection listening on the channel.
func (s *Console) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	return conn, nil
}

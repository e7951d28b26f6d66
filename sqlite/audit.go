// Package sqlite keeps interlock's state in SQLite databases in the
// gateway's data directory (the default), using the pure-Go
// modernc.org/sqlite driver so the binary stays static: the audit log
// (audit.db), and the state that every interlock process on that
// directory shares (state.db): approvals and standing grants, the nonces
// of live confirm tokens, and the calls each budget counted.
//
// Records are stored as the JSON they were hashed from, one row each, keyed
// by their sequence number. Appends are batched by [audit.GroupCommit].
// A batch is linked after the head this process wrote last and written by
// one INSERT, its own transaction; when another process has appended
// since, the key on seq refuses it, and the batch goes again in an
// IMMEDIATE transaction that reads the chain's head inside the lock. So
// several processes may share a file and the chain stays whole. The
// database runs in WAL mode with synchronous=NORMAL: a
// commit survives a crash of the process. A batch that holds a durable
// record is committed with synchronous=FULL, which also flushes it to disk.
//
// [Approvals] stores each approval and grant as its JSON, one row each.
// Every change is one IMMEDIATE transaction that applies the rules of
// package approval under the write lock, so processes sharing the file
// consume an approval, and count a grant's uses, exactly once. [Tokens]
// keeps a row per binding with the nonce of its live token, and [Budgets]
// a row per counted call; each issue, consumption and take is likewise
// one IMMEDIATE transaction, so of the processes that redeem one token
// exactly one wins, and together they take no more than a budget allows.
// The changes to the state are all committed with synchronous=FULL: a
// call that ran must not run again, nor go uncounted, after a power cut.
// A process opens the state once, as a [State], whose stores take turns
// on one connection.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"iter"
	"slices"

	_ "modernc.org/sqlite" // registers the pure-Go "sqlite" driver

	"github.com/interlock-mcp/interlock/audit"
)

const dsnParams = "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"

// auditSQL is the audit log's SQL, as package audit writes it for
// every relational store.
var auditSQL = audit.SQLOf(audit.SQLite)

// Audit is an audit log in one SQLite file.
type Audit struct {
	*audit.GroupCommit
	writer *sql.Conn
	// The statements of a batch are prepared once on the writer's
	// connection: parsing head and insert anew was a fifth of an append's
	// cost, and BEGIN and COMMIT a twentieth. begin and end begin and
	// commit the batch's transaction.
	begin, head, end *sql.Stmt
	// inserts write rowsPer[i] records in one statement each: a batch is
	// written in as few of them as its size allows, a statement's own
	// cost paid once for many records.
	inserts [len(rowsPer)]*sql.Stmt
	// synchronous is the writer's synchronous level, as commit last set
	// it ("" when a change of it failed): a run of durable batches, the
	// common case, sets it once rather than twice a batch.
	synchronous string
	// wrote is the head as this process's last commit left it, and
	// whether there is one (none before the first commit and after a
	// failed one): a batch linked after it needs neither BEGIN, nor the
	// head's read, nor COMMIT, three of a lone record's four statements.
	wrote struct {
		known bool
		seq   int64
		hash  string
	}
	// longWay counts the batches left to write the long way after the
	// short one was refused: processes that share the file and take turns
	// would otherwise pay for a refused statement nearly every batch.
	longWay int
	db      *sql.DB
	path    string
}

var (
	_ audit.Log    = (*Audit)(nil)
	_ audit.Reader = (*Audit)(nil)
	_ audit.Queuer = (*Audit)(nil)
)

// OpenAudit opens (creating when needed) the audit log at path.
func OpenAudit(ctx context.Context, path string) (*Audit, error) {
	db, err := sql.Open("sqlite", path+dsnParams)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	if _, err := db.ExecContext(ctx, auditSQL.Schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("audit log %s: creating tables: %w", path, err)
	}
	writer, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	a := &Audit{writer: writer, db: db, path: path, synchronous: "NORMAL"}
	type prepared struct {
		stmt  **sql.Stmt
		query string
	}
	statements := []prepared{{&a.begin, "BEGIN IMMEDIATE"}, {&a.head, auditSQL.Head}, {&a.end, "COMMIT"}}
	for i, n := range rowsPer {
		statements = append(statements, prepared{&a.inserts[i], auditSQL.AppendRows(n)})
	}
	for _, st := range statements {
		if *st.stmt, err = writer.PrepareContext(ctx, st.query); err != nil {
			break
		}
	}
	if err != nil {
		writer.Close()
		db.Close()
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	a.GroupCommit = audit.NewGroupCommit(a.commit)
	return a, nil
}

// rowsPer are the numbers of records the prepared inserts write, largest
// first and ending in 1, so any batch is written by them.
var rowsPer = [...]int{64, 16, 4, 1}

// commit writes one batch in one transaction: after the head this process
// wrote last when one statement holds the batch and no other process has
// appended since, else after the head it reads under the write lock.
func (a *Audit) commit(ctx context.Context, durable bool, recs []*audit.Record) (err error) {
	level := "NORMAL"
	if durable {
		level = "FULL"
	}
	if a.synchronous != level {
		a.synchronous = ""
		if _, err := a.writer.ExecContext(ctx, "PRAGMA synchronous="+level); err != nil {
			return fmt.Errorf("audit log %s: %w", a.path, err)
		}
		a.synchronous = level
	}
	known := a.wrote.known
	a.wrote.known = false
	if a.longWay > 0 {
		a.longWay--
	} else if known && slices.Contains(rowsPer[:], len(recs)) {
		// One INSERT is its own transaction, begun for writing, so the key
		// on seq is checked against the latest records: another process's
		// append since takes the seq this batch would, and refuses it.
		if seq, hash, err := a.write(ctx, a.wrote.seq, a.wrote.hash, recs); err == nil {
			a.wrote.seq, a.wrote.hash, a.wrote.known = seq, hash, true
			return nil
		}
		a.longWay = 8
	}
	// The transaction is begun and ended by statements on the writer's
	// own connection, so the statements prepared on it run inside it as
	// they are: database/sql's Tx would prepare them anew every time.
	if _, err := a.begin.ExecContext(ctx); err != nil {
		return fmt.Errorf("audit log %s: %w", a.path, err)
	}
	committed := false
	defer func() {
		if !committed {
			_, _ = a.writer.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	seq, prev, err := scanHead(a.head.QueryRowContext(ctx))
	if err != nil {
		return fmt.Errorf("audit log %s: reading the head: %w", a.path, err)
	}
	if seq, prev, err = a.write(ctx, seq, prev, recs); err != nil {
		return err
	}
	if _, err := a.end.ExecContext(ctx); err != nil {
		return fmt.Errorf("audit log %s: committing: %w", a.path, err)
	}
	committed = true
	a.wrote.seq, a.wrote.hash, a.wrote.known = seq, prev, true
	return nil
}

// write links recs after the record seq, whose hash is prev, and inserts
// them, in as few statements as their number allows. It returns the new
// head.
func (a *Audit) write(ctx context.Context, seq int64, prev string, recs []*audit.Record) (int64, string, error) {
	args := make([]any, 0, 3*min(len(recs), rowsPer[0]))
	for len(recs) > 0 {
		// The largest statement the records left fill.
		i := 0
		for rowsPer[i] > len(recs) {
			i++
		}
		args = args[:0]
		for _, r := range recs[:rowsPer[i]] {
			seq++
			b, err := r.Link(seq, prev)
			if err != nil {
				return 0, "", err
			}
			args = append(args, r.Seq, r.Hash, string(b))
			prev = r.Hash
		}
		if _, err := a.inserts[i].ExecContext(ctx, args...); err != nil {
			return 0, "", fmt.Errorf("audit log %s: writing records %d to %d: %w", a.path, recs[0].Seq, recs[rowsPer[i]-1].Seq, err)
		}
		recs = recs[rowsPer[i]:]
	}
	return seq, prev, nil
}

func scanHead(row *sql.Row) (int64, string, error) {
	var seq int64
	var hash string
	err := row.Scan(&seq, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", nil
	}
	return seq, hash, err
}

// Head returns the sequence number and hash of the last record; 0 and ""
// for an empty log.
func (a *Audit) Head(ctx context.Context) (int64, string, error) {
	return scanHead(a.db.QueryRowContext(ctx, auditSQL.Head))
}

// Records implements [audit.Reader].
func (a *Audit) Records(ctx context.Context, from int64) iter.Seq2[*audit.Record, error] {
	return func(yield func(*audit.Record, error) bool) {
		rows, err := a.db.QueryContext(ctx, auditSQL.From, from)
		if err != nil {
			yield(nil, fmt.Errorf("audit log %s: %w", a.path, err))
			return
		}
		defer rows.Close()
		audit.YieldRecords(rows, func(err error) error { return fmt.Errorf("audit log %s: %w", a.path, err) }, yield)
	}
}

// AppendCheckpoint implements [audit.CheckpointStore].
func (a *Audit) AppendCheckpoint(ctx context.Context, cp audit.Checkpoint) error {
	_, err := a.db.ExecContext(ctx, auditSQL.AppendCheckpoint, audit.CheckpointArgs(cp)...)
	if err != nil {
		return fmt.Errorf("audit log %s: %w", a.path, err)
	}
	return nil
}

// Checkpoints implements [audit.CheckpointStore].
func (a *Audit) Checkpoints(ctx context.Context) ([]audit.Checkpoint, error) {
	rows, err := a.db.QueryContext(ctx, auditSQL.Checkpoints)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", a.path, err)
	}
	defer rows.Close()
	cps, err := audit.ScanCheckpoints(rows)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", a.path, err)
	}
	return cps, nil
}

// Close writes what is queued and closes the database.
func (a *Audit) Close() error {
	a.GroupCommit.Close()
	errs := []error{a.begin.Close(), a.head.Close(), a.end.Close()}
	for _, st := range a.inserts {
		errs = append(errs, st.Close())
	}
	return errors.Join(append(errs, a.writer.Close(), a.db.Close())...)
}

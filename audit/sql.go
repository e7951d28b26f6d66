package audit

import (
	"fmt"
	"strings"
	"time"
)

// SQL is the SQL of an audit log kept in a relational database, written
// once for every such store (package sqlite and package postgres). The
// stores differ in how they keep the chain's head and make a batch
// durable, not in their tables or in how a record is written and read.
type SQL struct {
	// Schema creates the tables of records and of checkpoints.
	Schema string
	// Append writes one linked record: seq, hash, canonical record.
	Append string
	// AppendRows writes n linked records in one statement, their seq,
	// hash and canonical record in turn: a batch costs a statement per
	// rows, not per record.
	AppendRows func(n int) string
	// Head reads the seq and hash of the last record.
	Head string
	// From reads the canonical records from a seq on, in order.
	From string
	// AppendCheckpoint writes one checkpoint; CheckpointArgs are its
	// arguments.
	AppendCheckpoint string
	// Checkpoints reads every checkpoint, in order, for ScanCheckpoints.
	Checkpoints string
}

// Dialects of SQL: how a database names an integer column and numbers a
// statement's parameters.
var (
	// SQLite's INTEGER PRIMARY KEY is the table's rowid, as logs
	// written before kept it.
	SQLite     = Dialect{Integer: "INTEGER", Text: "TEXT", param: func(int) string { return "?" }}
	PostgreSQL = Dialect{Integer: "bigint", Text: "text", param: func(n int) string { return fmt.Sprintf("$%d", n) }}
)

// Dialect is one database's way of writing [SQL].
type Dialect struct {
	Integer, Text string
	param         func(n int) string
}

// params returns n parameters, as in "?, ?" or "$1, $2".
func (d Dialect) params(n int) string {
	p := make([]string, n)
	for i := range p {
		p[i] = d.param(i + 1)
	}
	return strings.Join(p, ", ")
}

// appendRows is SQL.AppendRows in dialect d.
func (d Dialect) appendRows(n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO audit (seq, hash, record) VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "(%s, %s, %s)", d.param(3*i+1), d.param(3*i+2), d.param(3*i+3))
	}
	return b.String()
}

// checkpointColumns are the columns ScanCheckpoints reads, in order.
const checkpointColumns = "seq, hash, time, key_id, signature"

// SQLOf returns the audit log's SQL in dialect d.
func SQLOf(d Dialect) SQL {
	appendCheckpoint, checkpoints := d.CheckpointsIn("audit_checkpoints")
	return SQL{
		Schema: fmt.Sprintf(`
CREATE TABLE IF NOT EXISTS audit (
	seq    %[1]s PRIMARY KEY,
	hash   %[2]s NOT NULL,
	record %[2]s NOT NULL
);
CREATE TABLE IF NOT EXISTS audit_checkpoints (
	seq       %[1]s PRIMARY KEY,
	hash      %[2]s NOT NULL,
	time      %[2]s NOT NULL,
	key_id    %[2]s NOT NULL,
	signature %[2]s NOT NULL
);`, d.Integer, d.Text),
		Append:           "INSERT INTO audit (seq, hash, record) VALUES (" + d.params(3) + ")",
		AppendRows:       d.appendRows,
		Head:             "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1",
		From:             "SELECT record FROM audit WHERE seq >= " + d.param(1) + " ORDER BY seq",
		AppendCheckpoint: appendCheckpoint,
		Checkpoints:      checkpoints,
	}
}

// CheckpointsIn returns the statements that append a checkpoint to table
// and read them all back, in dialect d: table is audit_checkpoints, or a
// table outside the log that keeps copies of them.
func (d Dialect) CheckpointsIn(table string) (appendStmt, read string) {
	return "INSERT INTO " + table + " (" + checkpointColumns + ") VALUES (" + d.params(5) + ")",
		"SELECT " + checkpointColumns + " FROM " + table + " ORDER BY seq"
}

// CheckpointArgs are the arguments of SQL.AppendCheckpoint for cp: its
// time as RFC 3339 text, which ScanCheckpoints reads back.
func CheckpointArgs(cp Checkpoint) []any {
	return []any{cp.Seq, cp.Hash, cp.Time.UTC().Format(time.RFC3339Nano), cp.KeyID, cp.Signature}
}

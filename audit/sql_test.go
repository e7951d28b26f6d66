package audit_test

import (
	"fmt"

	"github.com/interlock-mcp/interlock/audit"
)

// The same statements, in each database's numbering of parameters.
func ExampleSQLOf() {
	for _, d := range []audit.Dialect{audit.SQLite, audit.PostgreSQL} {
		q := audit.SQLOf(d)
		fmt.Println(q.Append)
		fmt.Println(q.AppendRows(2))
		fmt.Println(q.From)
	}
	_, read := audit.PostgreSQL.CheckpointsIn("team.checkpoints")
	fmt.Println(read)
	// Output:
	// INSERT INTO audit (seq, hash, record) VALUES (?, ?, ?)
	// INSERT INTO audit (seq, hash, record) VALUES (?, ?, ?), (?, ?, ?)
	// SELECT record FROM audit WHERE seq >= ? ORDER BY seq
	// INSERT INTO audit (seq, hash, record) VALUES ($1, $2, $3)
	// INSERT INTO audit (seq, hash, record) VALUES ($1, $2, $3), ($4, $5, $6)
	// SELECT record FROM audit WHERE seq >= $1 ORDER BY seq
	// SELECT seq, hash, time, key_id, signature FROM team.checkpoints ORDER BY seq
}

package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/interlock-mcp/interlock/approval"
)

// operatorLinkHolder is whom a link of the console_links table of earlier
// versions signed in: the local operator of a gateway without
// authentication (gateway.Operator, of tenant interlock.TenantLocal).
var operatorLinkHolder = approval.Identity{Principal: "operator", Tenant: "local"}

// moveOperatorLinks moves the live links of console_links, where
// `interlock console link` of earlier versions kept them, into the
// console's one-time links, which now hold every link whoever made it,
// and drops the table. Both keep a link by the SHA-256 of its token, so a
// link printed before an upgrade still signs in once after it. One
// IMMEDIATE transaction: of several processes opening the file at once,
// one moves them and the others find no table.
func moveOperatorLinks(ctx context.Context, h *handle) error {
	who, err := json.Marshal(operatorLinkHolder)
	if err != nil {
		return err
	}
	return h.change(ctx, func(c *sql.Conn, now time.Time) error {
		var old int
		if err := c.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'console_links'").Scan(&old); err != nil || old == 0 {
			return err
		}
		if _, err := c.ExecContext(ctx, `INSERT OR IGNORE INTO console_once (key, who, expires_at)
			SELECT hash, ?, expires_at FROM console_links WHERE expires_at > ?`, string(who), now.UnixNano()); err != nil {
			return err
		}
		_, err := c.ExecContext(ctx, "DROP TABLE console_links")
		return err
	})
}

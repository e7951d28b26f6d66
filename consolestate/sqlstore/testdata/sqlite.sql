-- The tables a gateway made in a SQLite state file before package sqlstore made them,
-- kept as it made them for TestReadsWhatEarlierGatewaysWrote.
CREATE TABLE IF NOT EXISTS approvals (
	seq        INTEGER PRIMARY KEY,
	id         TEXT NOT NULL UNIQUE,
	key        TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	ends_at    INTEGER NOT NULL,
	body       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_key ON approvals (key, seq);
CREATE INDEX IF NOT EXISTS approvals_ends ON approvals (ends_at);
CREATE TABLE IF NOT EXISTS grants (
	id         TEXT PRIMARY KEY,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	body       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS grants_expires ON grants (expires_at);
CREATE TABLE IF NOT EXISTS console_sessions (
	key          TEXT PRIMARY KEY,
	body         TEXT NOT NULL,
	last_seen    INTEGER NOT NULL,
	flash        BLOB,
	registration BLOB
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS console_passkey_users (
	owner  TEXT PRIMARY KEY,
	handle BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS console_passkeys (
	owner TEXT NOT NULL,
	id    BLOB NOT NULL,
	seq   INTEGER NOT NULL,
	rev   INTEGER NOT NULL,
	body  TEXT NOT NULL,
	PRIMARY KEY (owner, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS console_once (
	key        TEXT PRIMARY KEY,
	who        TEXT NOT NULL,
	expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS console_signals (
	seq  INTEGER PRIMARY KEY AUTOINCREMENT,
	what TEXT NOT NULL,
	at   INTEGER NOT NULL
);

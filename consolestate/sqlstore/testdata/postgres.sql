-- The tables a gateway made in a PostgreSQL schema before package sqlstore made them,
-- kept as it made them for TestReadsWhatEarlierGatewaysWrote.
CREATE TABLE IF NOT EXISTS approvals (
	id         text PRIMARY KEY,
	key        text NOT NULL,
	created_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL,
	body       text NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_key ON approvals (key, created_at);
CREATE TABLE IF NOT EXISTS grants (
	id         text PRIMARY KEY,
	expires_at timestamptz NOT NULL,
	body       text NOT NULL
);
CREATE TABLE IF NOT EXISTS console_sessions (
	key          text PRIMARY KEY,
	body         text NOT NULL,
	last_seen    bigint NOT NULL,
	flash        bytea,
	registration bytea
);
CREATE TABLE IF NOT EXISTS console_passkey_users (
	owner  text PRIMARY KEY,
	handle bytea NOT NULL
);
CREATE TABLE IF NOT EXISTS console_passkeys (
	owner text NOT NULL,
	id    bytea NOT NULL,
	seq   bigserial,
	rev   bigint NOT NULL,
	body  text NOT NULL,
	PRIMARY KEY (owner, id)
);
CREATE TABLE IF NOT EXISTS console_once (
	key        text PRIMARY KEY,
	who        text NOT NULL,
	expires_at bigint NOT NULL
);

// Package redis keeps interlock's live confirm tokens in Redis, so that
// several gateways sharing one Redis server and one INTERLOCK_SECRET honour
// each token exactly once between them; approvals.go and grants.go keep
// approvals and standing grants there likewise, budget.go counts the calls
// of each budget, console.go keeps the console's sessions, passkeys and
// links, roster.go the gateways that share the server, and tasks.go the
// tasks whose calls clients wait on.
//
// The client's own log lines (a pool that fails to dial, say) go to the
// default slog logger at debug level: interlock reports each failure of
// the store in its own words, and the client would print it again,
// unstructured, on standard error. The client's logger is global, so this
// holds for every go-redis client in the process once Open has run.
//
// Each binding {tenant, principal, tool} has one key holding the nonce of
// its live token, with the token's TTL as the key's expiry. Issuing
// overwrites the key (superseding the earlier token); consuming runs a Lua
// script that deletes the key only if it still holds the presented nonce, so
// of any number of concurrent redemptions, on any replica, exactly one wins.
package redis

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/interlock-mcp/interlock"
)

// consume deletes KEYS[1] if it holds ARGV[1]; 1 when it did.
var consume = goredis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
`)

// quietClient sends the client's log to clientLog, once.
var quietClient sync.Once

// clientLog is where the go-redis client's own log lines go: slog, at
// debug level.
type clientLog struct{}

func (clientLog) Printf(ctx context.Context, format string, v ...any) {
	slog.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
}

// Tokens is an [interlock.TokenStore] in Redis.
type Tokens struct {
	client *goredis.Client
	prefix string
}

var _ interlock.TokenStore = (*Tokens)(nil)

// Open connects to the Redis server at url (redis:// or rediss://) and
// checks that it answers. Every key starts with prefix.
func Open(ctx context.Context, url, prefix string) (*Tokens, error) {
	quietClient.Do(func() { goredis.SetLogger(clientLog{}) })
	opts, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
	client := goredis.NewClient(opts)
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("redis store: cannot reach %s: %w", opts.Addr, err)
	}
	t := New(client, prefix)
	if err := t.Approvals().indexCallers(ctx); err != nil {
		client.Close()
		return nil, err
	}
	return t, nil
}

// New returns a store that uses client; every key starts with prefix.
func New(client *goredis.Client, prefix string) *Tokens {
	return &Tokens{client: client, prefix: prefix}
}

func (t *Tokens) key(binding string) string { return t.prefix + "token:" + binding }

// Issue implements [interlock.TokenStore].
func (t *Tokens) Issue(ctx context.Context, binding, nonce string, ttl time.Duration) error {
	if err := t.client.Set(ctx, t.key(binding), nonce, ttl).Err(); err != nil {
		return fmt.Errorf("redis store: issuing token: %w", err)
	}
	return nil
}

// Consume implements [interlock.TokenStore].
func (t *Tokens) Consume(ctx context.Context, binding, nonce string) (bool, error) {
	n, err := consume.Run(ctx, t.client, []string{t.key(binding)}, nonce).Int()
	if err != nil {
		return false, fmt.Errorf("redis store: consuming token: %w", err)
	}
	return n == 1, nil
}

// Prefix returns the prefix every key starts with.
func (t *Tokens) Prefix() string { return t.prefix }

// Close closes the connection pool.
func (t *Tokens) Close() error { return t.client.Close() }

package audit

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
)

// A Checkpoint is the audit chain's head signed with the operator's Ed25519
// key. Someone who can write to the audit database can rewrite the whole
// chain so that it verifies again, but cannot sign: a checkpoint whose
// record no longer has its hash, or is gone, shows the rewrite.
type Checkpoint struct {
	Seq  int64     `json:"seq"`
	Hash string    `json:"hash"`
	Time time.Time `json:"time"`
	// KeyID names the signing key: the first 16 hex digits of the SHA-256
	// of its public key.
	KeyID string `json:"key_id"`
	// Signature is the base64 Ed25519 signature of the message
	// "interlock audit checkpoint v1\n<seq>\n<hash>\n<time, RFC 3339 UTC>".
	Signature string `json:"signature"`
}

// CheckpointStore keeps checkpoints beside the records they sign.
type CheckpointStore interface {
	AppendCheckpoint(ctx context.Context, cp Checkpoint) error
	Checkpoints(ctx context.Context) ([]Checkpoint, error)
}

// ScanCheckpoints reads the rows of [SQL].Checkpoints, time as RFC 3339
// text, from a checkpoint table of database/sql or pgx.
func ScanCheckpoints(rows Rows) ([]Checkpoint, error) {
	var out []Checkpoint
	for rows.Next() {
		var cp Checkpoint
		var t string
		if err := rows.Scan(&cp.Seq, &cp.Hash, &t, &cp.KeyID, &cp.Signature); err != nil {
			return nil, err
		}
		var err error
		if cp.Time, err = time.Parse(time.RFC3339Nano, t); err != nil {
			return nil, fmt.Errorf("checkpoint %d: %w", cp.Seq, err)
		}
		out = append(out, cp)
	}
	return out, rows.Err()
}

// KeyID returns the identifier of an Ed25519 public key.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

func checkpointMessage(seq int64, hash string, t time.Time) []byte {
	return []byte("interlock audit checkpoint v1\n" + strconv.FormatInt(seq, 10) + "\n" + hash + "\n" + t.UTC().Format(time.RFC3339Nano))
}

// SignCheckpoint signs the head {seq, hash} at time t.
func SignCheckpoint(key ed25519.PrivateKey, seq int64, hash string, t time.Time) Checkpoint {
	t = t.UTC()
	return Checkpoint{
		Seq: seq, Hash: hash, Time: t,
		KeyID:     KeyID(key.Public().(ed25519.PublicKey)),
		Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(key, checkpointMessage(seq, hash, t))),
	}
}

// VerifySignature reports whether pub signed the checkpoint.
func (c Checkpoint) VerifySignature(pub ed25519.PublicKey) bool {
	sig, err := base64.StdEncoding.DecodeString(c.Signature)
	return err == nil && ed25519.Verify(pub, checkpointMessage(c.Seq, c.Hash, c.Time), sig)
}

// CheckCheckpoints checks a chain's records against checkpoints signed
// with pub: each checkpoint's signature must verify, and the record it
// names must exist with the hash it signed. hashes maps sequence numbers to
// the hashes of a chain that [Verify] accepted.
func CheckCheckpoints(cps []Checkpoint, pub ed25519.PublicKey, hashes map[int64]string) error {
	for _, cp := range cps {
		if !cp.VerifySignature(pub) {
			return &ChainError{Seq: cp.Seq, Reason: fmt.Sprintf("its checkpoint of %s does not verify under key %s: forged, or signed by another key",
				cp.Time.Format(time.RFC3339), KeyID(pub))}
		}
		h, ok := hashes[cp.Seq]
		switch {
		case !ok:
			return &ChainError{Seq: cp.Seq, Reason: fmt.Sprintf("is gone, though the checkpoint of %s signed it: the log was cut short", cp.Time.Format(time.RFC3339))}
		case h != cp.Hash:
			return &ChainError{Seq: cp.Seq, Reason: fmt.Sprintf("differs from what the checkpoint of %s signed: the chain was rewritten", cp.Time.Format(time.RFC3339))}
		}
	}
	return nil
}

// Checkpointer signs the head of an audit chain when it moved, at a fixed
// interval, and hands each checkpoint to the store and to an extra sink.
type Checkpointer struct {
	Head  func(ctx context.Context) (int64, string, error)
	Store CheckpointStore
	Key   ed25519.PrivateKey
	// Sink receives each checkpoint too; nil for none.
	Sink func(Checkpoint) error

	last int64
}

// Checkpoint signs the head now if it moved since the last checkpoint.
func (c *Checkpointer) Checkpoint(ctx context.Context) error {
	seq, hash, err := c.Head(ctx)
	if err != nil || seq == 0 || seq == c.last {
		return err
	}
	cp := SignCheckpoint(c.Key, seq, hash, time.Now())
	if err := c.Store.AppendCheckpoint(ctx, cp); err != nil {
		return fmt.Errorf("audit checkpoint %d: %w", seq, err)
	}
	if c.Sink != nil {
		if err := c.Sink(cp); err != nil {
			return fmt.Errorf("audit checkpoint %d: sink: %w", seq, err)
		}
	}
	c.last = seq
	return nil
}

// Run checkpoints every interval until ctx ends, and once more then, so the
// last records of a gateway that stops are signed too. Failures go to
// onError.
func (c *Checkpointer) Run(ctx context.Context, every time.Duration, onError func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			if err := c.Checkpoint(context.WithoutCancel(ctx)); err != nil {
				onError(err)
			}
			return
		}
		if err := c.Checkpoint(ctx); err != nil {
			onError(err)
		}
	}
}

package consolestate

import (
	"encoding/json"
	"fmt"
	"time"
)

// What follows is how a relational store (package sqlite, package postgres)
// writes console state in its rows, written once for both.

// Key is the column value an owner's passkeys are kept under: a JSON pair,
// so no tenant or principal can be made to read as another.
func (o Owner) Key() string {
	b, _ := json.Marshal([]string{o.Tenant, o.Principal}) // strings always encode
	return string(b)
}

// Column is the column slot s is kept in, checked against the slots there
// are, so a slot never reaches SQL unchecked.
func (s Slot) Column() (string, error) {
	if err := CheckSlot(s); err != nil {
		return "", err
	}
	return string(s), nil
}

// DecodeSession reads a session kept as its JSON body and, apart, the time
// it was last seen in Unix nanoseconds (a column of its own, so that idle
// sessions are found and touched without decoding their bodies).
func DecodeSession(body string, lastSeen int64) (Session, error) {
	var sess Session
	if err := json.Unmarshal([]byte(body), &sess); err != nil {
		return Session{}, fmt.Errorf("reading a session: %w", err)
	}
	sess.LastSeen = time.Unix(0, lastSeen).In(sess.Created.Location())
	return sess, nil
}

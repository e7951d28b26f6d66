package consolestate

import (
	"testing"
	"time"
)

func TestOwnerKeysDoNotCollide(t *testing.T) {
	owners := []Owner{{"acme", "bob"}, {"acme\",\"bob", ""}, {"", "acme\",\"bob"}, {"acm", "ebob"}}
	seen := map[string]Owner{}
	for _, o := range owners {
		if prev, dup := seen[o.Key()]; dup {
			t.Errorf("%+v and %+v share the key %s", prev, o, o.Key())
		}
		seen[o.Key()] = o
	}
}

func TestSlotColumn(t *testing.T) {
	if col, err := Flash.Column(); err != nil || col != "flash" {
		t.Errorf("Flash.Column() = %q, %v", col, err)
	}
	if _, err := Slot("body; DROP TABLE console_sessions").Column(); err == nil {
		t.Error("a slot that is not one reached a column")
	}
}

func TestDecodeSession(t *testing.T) {
	created := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	sess, err := DecodeSession(`{"created":"2026-11-25T10:00:00Z"}`, created.Add(time.Minute).UnixNano())
	if err != nil || !sess.LastSeen.Equal(created.Add(time.Minute)) || sess.LastSeen.Location() != time.UTC {
		t.Errorf("DecodeSession = %+v, %v", sess, err)
	}
	if _, err := DecodeSession("{", 0); err == nil {
		t.Error("a broken body decoded")
	}
}

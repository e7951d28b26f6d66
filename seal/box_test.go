package seal

import (
	"bytes"
	"errors"
	"testing"
)

func TestBox(t *testing.T) {
	old, current := bytes.Repeat([]byte("o"), 32), bytes.Repeat([]byte("c"), 32)
	before, _ := New(old)
	after, _ := New(current, old)
	other, _ := New(bytes.Repeat([]byte("x"), 32))
	plain := []byte(`{"name":"refund_invoice","arguments":{"card":"4111"}}`)
	box := before.Box(plain, []byte("tsk_1"))
	if bytes.Contains(box, []byte("4111")) {
		t.Fatal("the box shows what it holds")
	}
	tampered := bytes.Clone(box)
	tampered[len(tampered)-1] ^= 1
	for _, tt := range []struct {
		name string
		s    *Sealer
		box  []byte
		ad   string
		want error
	}{
		{"the key that made it", before, box, "tsk_1", nil},
		{"after a rotation, by the older key", after, box, "tsk_1", nil},
		{"another deployment's key", other, box, "tsk_1", ErrBoxOpen},
		{"moved to another place", before, box, "tsk_2", ErrBoxOpen},
		{"changed", before, tampered, "tsk_1", ErrBoxOpen},
		{"cut short", before, box[:5], "tsk_1", ErrBoxOpen},
		{"empty", before, nil, "tsk_1", ErrBoxOpen},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.s.Unbox(tt.box, []byte(tt.ad))
			if !errors.Is(err, tt.want) || (err == nil && !bytes.Equal(got, plain)) {
				t.Errorf("Unbox = %q, %v; want %v", got, err, tt.want)
			}
		})
	}
	if bytes.Equal(before.Box(plain, nil), before.Box(plain, nil)) {
		t.Error("two boxes of the same bytes are alike")
	}
}

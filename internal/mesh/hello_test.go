package mesh

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/gocoll/gocoll/transport"
)

// TestHelloWire pins what every hello says alike: the magic, then rank,
// size, slots and slot size, little-endian, and the namespace's hash
// where the layout puts it.
func TestHelloWire(t *testing.T) {
	l := HelloLayout{Magic: "ABCD", Len: 32, NamespaceAt: 24, What: "test"}
	h := Hello{Rank: 1, Size: 4, Slots: 8, SlotSize: 1 << 20, Namespace: 0x0102030405060708}
	b := l.Marshal(h)
	want := []byte("ABCD\x01\x00\x00\x00\x04\x00\x00\x00\x08\x00\x00\x00\x00\x00\x10\x00\x00\x00\x00\x00\x08\x07\x06\x05\x04\x03\x02\x01")
	if !bytes.Equal(b, want) {
		t.Fatalf("Marshal wrote % x, want % x", b, want)
	}
	got, err := l.Parse(b)
	if err != nil || got != h {
		t.Fatalf("Parse = %+v, %v, want %+v", got, err, h)
	}
	for _, bad := range [][]byte{b[:len(b)-1], append([]byte("ABCE"), b[4:]...), nil} {
		if _, err := l.Parse(bad); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "bad test hello") {
			t.Errorf("Parse(% x) = %v, want a bad test hello", bad, err)
		}
	}
}

func TestHelloCheck(t *testing.T) {
	o := transport.LinkOptions{Slots: 4, SlotSize: 64 << 10, Namespace: "c1/"}
	mine := NewHello(1, 4, o)
	other := o
	other.Namespace = "c2/"
	bigger := o
	bigger.SlotSize *= 2
	for _, c := range []struct {
		name      string
		peer      Hello
		want, cap int
		err       string
		protocol  bool
	}{
		{"the rank dialed", NewHello(2, 4, o), 2, 4, "", false},
		{"any rank dialing", NewHello(3, 4, o), -1, 4, "", false},
		{"a spare rank dialing", NewHello(5, 4, o), -1, 6, "", false},
		{"another communicator", NewHello(2, 4, other), 2, 4, "peer belongs to another communicator", true},
		{"another size", NewHello(2, 5, o), 2, 4, "peer says the job has 5 ranks, this rank says 4", false},
		{"another rank", NewHello(3, 4, o), 2, 4, "expected rank 2, peer says it is rank 3", false},
		{"itself", NewHello(1, 4, o), -1, 4, "rank 1 may not dial rank 1", false},
		{"past capacity", NewHello(4, 4, o), -1, 4, "rank 4 may not dial rank 1", false},
		{"other slots", NewHello(2, 4, bigger), 2, 4, "peer uses 4 slots of 131072 bytes, this rank 4 of 65536", false},
	} {
		err := c.peer.Check(mine, c.want, c.cap)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err != "" && (err == nil || !strings.HasPrefix(err.Error(), c.err)):
			t.Errorf("%s: %v, want %q", c.name, err, c.err)
		case c.err != "" && errors.Is(err, ErrProtocol) != c.protocol:
			t.Errorf("%s: %v wraps ErrProtocol: %v, want %v", c.name, err, !c.protocol, c.protocol)
		}
	}
}

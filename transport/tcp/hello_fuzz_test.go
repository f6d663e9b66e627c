package tcp

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gocoll/gocoll/internal/mesh"
)

// FuzzParseHello: parseHello never panics, refuses with errProtocol, and
// accepts only a hello that marshals back to the very same bytes.
func FuzzParseHello(f *testing.F) {
	f.Add(hello{Hello: mesh.Hello{Rank: 1, Size: 4, Slots: 8, SlotSize: 1 << 20, Namespace: 42}}.marshal())
	f.Add([]byte("MESH" + string(make([]byte, helloLen-4))))
	f.Add([]byte(helloMagic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHello(b)
		if err != nil {
			if !errors.Is(err, errProtocol) {
				t.Fatalf("error %v does not wrap errProtocol", err)
			}
			return
		}
		if !bytes.Equal(h.marshal(), b) {
			t.Fatalf("parsed % x as %+v, which marshals to % x", b, h, h.marshal())
		}
	})
}

// TestHelloWire pins tcp's hello on the wire: a peer of another build
// must read it alike.
func TestHelloWire(t *testing.T) {
	h := hello{Hello: mesh.Hello{Rank: 1, Size: 4, Slots: 8, SlotSize: 1 << 20, Namespace: 42}, flags: helloEncrypt}
	for i := range h.salt {
		h.salt[i] = byte(i + 1)
	}
	want := []byte("MSH3\x01\x00\x00\x00\x04\x00\x00\x00\b\x00\x00\x00\x00\x00\x10\x00*\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x01\x02\x03\x04\x05\x06\a\b\t\n\v\f\r\x0e\x0f\x10")
	if b := h.marshal(); !bytes.Equal(b, want) {
		t.Fatalf("marshal = %q, want %q", b, want)
	}
	if got, err := parseHello(want); err != nil || got != h {
		t.Fatalf("parseHello = %+v, %v, want %+v", got, err, h)
	}
}

package bootstrap

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

// FuzzDecodeScan: decodeScan never panics, refuses with ErrBadFrame, and
// what it accepts accounts for every byte; a value cannot be appended to
// over the bytes that follow it.
func FuzzDecodeScan(f *testing.F) {
	s := &Server{kv: map[string][]byte{"comm/host/0": []byte("h0"), "shm/addr/1": []byte("@gocoll-shm-1")}}
	f.Add(s.scan(""))
	f.Add([]byte{5, 0, 'a'})
	f.Add([]byte{1, 0, 'k', 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 0, 0, 0})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeScan(b)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error %v does not wrap ErrBadFrame", err)
			}
			return
		}
		// Walk the records again: the lengths must add up exactly.
		seen := 0
		for rest := b; len(rest) > 0; seen++ {
			kl := int(binary.LittleEndian.Uint16(rest))
			k := string(rest[2 : 2+kl])
			vl := int(binary.LittleEndian.Uint32(rest[2+kl:]))
			rest = rest[2+kl+4+vl:]
			if _, ok := m[k]; !ok {
				t.Fatalf("key %q not in the result", k)
			}
		}
		if len(m) > seen {
			t.Fatalf("%d keys from %d records", len(m), seen)
		}
		for k, v := range m {
			if cap(v) != len(v) {
				t.Fatalf("value of %q has room to grow over the next record", k)
			}
		}
	})
}

// FuzzDecodeDepartures: decodeDepartures never panics, refuses with
// ErrBadFrame, and what it accepts encodes and decodes to the same.
func FuzzDecodeDepartures(f *testing.F) {
	f.Add(encodeDepartures([]Departure{{Rank: 3, Why: diedWhy}, {Rank: 0, Why: "give up: timeout"}}))
	f.Add([]byte("-1\tx\n"))
	f.Add([]byte("99999999999\tx\n"))
	f.Add([]byte("3\n"))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ds, err := decodeDepartures(b)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error %v does not wrap ErrBadFrame", err)
			}
			return
		}
		for _, d := range ds {
			if d.Rank < 0 || d.Rank >= maxRank {
				t.Fatalf("rank %d accepted", d.Rank)
			}
		}
		again, err := decodeDepartures(encodeDepartures(ds))
		if err != nil || !(len(ds) == 0 && len(again) == 0 || reflect.DeepEqual(again, ds)) {
			t.Fatalf("%q decodes to %v, which encodes and decodes to %v, %v", b, ds, again, err)
		}
	})
}

package tcp

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// TestHKDF checks hkdfKey against RFC 5869's first SHA-256 test case
// (the first 32 bytes of its output).
func TestHKDF(t *testing.T) {
	ikm := bytes.Repeat([]byte{0x0b}, 22)
	salt, _ := hex.DecodeString("000102030405060708090a0b0c")
	info, _ := hex.DecodeString("f0f1f2f3f4f5f6f7f8f9")
	want := "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
	key, err := hkdfKey(ikm, salt, string(info))
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(key); got != want {
		t.Fatalf("hkdfKey = %s, want %s", got, want)
	}
}

// TestLinkKeys: the two ends of a connection agree on each direction's
// key, the directions differ, and another connection (other salts) of
// the same pair and token has keys of its own.
func TestLinkKeys(t *testing.T) {
	token := []byte("job-token")
	dh, lh := []byte("dialer hello, salt A"), []byte("listener hello, salt B")
	a, err := deriveKeys(token, dh, lh, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := deriveKeys(token, dh, lh, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	again, err := deriveKeys(token, dh, []byte("listener hello, salt C"), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("payload")
	seal := func(s *sealer) []byte { return s.aead.Seal(nil, make([]byte, nonceLen), msg, nil) }
	switch {
	case !bytes.Equal(seal(a.send), seal(b.recv)) || !bytes.Equal(seal(a.recv), seal(b.send)):
		t.Fatal("the two ends of a link derived different keys for one direction")
	case bytes.Equal(seal(a.send), seal(a.recv)):
		t.Fatal("both directions of a link share a key")
	case bytes.Equal(seal(a.send), seal(again.send)):
		t.Fatal("a new connection of the same pair reuses the old one's key")
	}
	n0 := bytes.Clone(a.send.next())
	if n1 := a.send.next(); bytes.Equal(n0, n1) {
		t.Fatal("two frames share a nonce")
	}
}

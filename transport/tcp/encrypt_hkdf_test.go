//go:build go1.24

package tcp

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"testing"
)

// TestHKDFMatchesStdlib checks hkdfKey against crypto/hkdf, which the
// module cannot call while it builds with Go 1.22.
func TestHKDFMatchesStdlib(t *testing.T) {
	for _, tc := range []struct{ secret, salt, info string }{
		{"token", "dialer hello|listener hello", "gocoll tcp frame key v1: rank 0 to rank 1"},
		{"", "", ""},
		{"a longer secret of 64 bytes..................................", "s", "i"},
	} {
		want, err := hkdf.Key(sha256.New, []byte(tc.secret), []byte(tc.salt), tc.info, 32)
		if err != nil {
			t.Fatal(err)
		}
		if got := hkdfKey([]byte(tc.secret), []byte(tc.salt), tc.info); !bytes.Equal(got, want) {
			t.Errorf("%+v: hkdfKey %x, crypto/hkdf %x", tc, got, want)
		}
	}
}

package auth

import (
	"bytes"
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"testing"
	"time"
)

// share makes a fresh scalar and the hello that carries its share for the
// given token, as an honest end or a stranger playing one would.
func share(t *testing.T, token []byte, svc Service) (*ecdh.PrivateKey, []byte) {
	t.Helper()
	g, err := generator(token, svc)
	if err != nil {
		t.Fatal(err)
	}
	y, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := y.ECDH(g)
	if err != nil {
		t.Fatal(err)
	}
	h := helloFor("GCOL", Version, uint16(svc), 0)
	copy(h[8:], s)
	return y, h
}

// dictionary holds the true token, hunter2 (the issue's), among wrong ones
// of the same kind.
var dictionary = []string{"password", "hunter1", "hunter2", "letmein", "s3cret", "grun", "hunter3", ""}

// TestCapturedHandshakeChecksNoGuess plays the stranger of issue 41 who holds
// the port a rank dials, so it is the listener and receives the dialer's
// proof; version 1 leaked the token to a dictionary from that one proof. The
// stranger committed to one guess when it sent its share. Afterwards it
// holds everything such a stranger can hold: its own scalar and share, the
// rank's hello and the rank's proof. For every word of the dictionary,
// verifies computes what the stranger can from those and the word, and asks
// whether the rank's proof confirms it. Only the committed guess can ever be
// checked: when it is wrong, no word verifies, not even the true token; when
// it is right, it verifies (so verifies is a real test, not one that always
// says no).
func TestCapturedHandshakeChecksNoGuess(t *testing.T) {
	const truth = "hunter2"
	// verifies is the stranger's offline test of candidate word w.
	verifies := func(y *ecdh.PrivateKey, own, rankHello, rankProof []byte, w string) bool {
		// The stranger can combine the word's generator with its own
		// scalar only; the rank's scalar it never learns. Were w the
		// token, the rank's share would be X25519(r, G_w) and the
		// stranger's own computation X25519(y, Y_rank) equals the rank's
		// X25519(r, share) only if the share it sent was X25519(y, G_w).
		// So the secret it can compute is X25519(y, Y_rank) over the
		// transcript with that share in its hello.
		g, err := generator([]byte(w), Mesh)
		if err != nil {
			t.Fatal(err)
		}
		s, err := y.ECDH(g)
		if err != nil {
			t.Fatal(err)
		}
		hello := bytes.Clone(own)
		copy(hello[8:], s)
		secret, err := sessionSecret(y, hello, rankHello, false)
		if err != nil {
			return false
		}
		return hmac.Equal(rankProof, proof(secret, true))
	}
	for _, committed := range []string{"hunter1", truth} {
		t.Run("committed to "+committed, func(t *testing.T) {
			rank, stranger := pair(t)
			errc := make(chan error, 1)
			go func() {
				errc <- Handshake(rank, []byte(truth), Mesh, true, time.Now().Add(5*time.Second))
			}()
			y, own := share(t, []byte(committed), Mesh)
			stranger.Write(own)
			rankHello := make([]byte, helloLen)
			rankProof := make([]byte, macLen)
			if _, err := io.ReadFull(stranger, rankHello); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(stranger, rankProof); err != nil {
				t.Fatal(err)
			}
			stranger.Close()
			if err := <-errc; err == nil {
				t.Fatal("the rank accepted a stranger")
			}
			var checked []string
			for _, w := range dictionary {
				if verifies(y, own, rankHello, rankProof, w) {
					checked = append(checked, w)
				}
			}
			want := []string(nil)
			if committed == truth {
				want = []string{truth}
			}
			if len(checked) != len(want) || (len(want) == 1 && checked[0] != want[0]) {
				t.Fatalf("words the captured exchange confirms: %q, want %q", checked, want)
			}
		})
	}
}

// TestEavesdropperChecksNoGuess records an exchange between two ends that
// both hold the token. An eavesdropper holds neither scalar; the best it can
// do for a word is to play each end again with a scalar of its own, and
// the recorded proofs confirm no word, the true one included.
func TestEavesdropperChecksNoGuess(t *testing.T) {
	const truth = "hunter2"
	ca, cb := pair(t)
	ra, rb := &recorder{Conn: ca}, &recorder{Conn: cb}
	deadline := time.Now().Add(5 * time.Second)
	errc := make(chan error, 1)
	go func() { errc <- Handshake(rb, []byte(truth), Mesh, false, deadline) }()
	if err := Handshake(ra, []byte(truth), Mesh, true, deadline); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	d, l := ra.sent(), rb.sent()
	dHello, dProof, lHello, lProof := d[:helloLen], d[helloLen:], l[:helloLen], l[helloLen:]
	for _, w := range dictionary {
		y, own := share(t, []byte(w), Mesh)
		for _, try := range []struct {
			mine, theirs, proof []byte
			dialer              bool
		}{
			{own, lHello, dProof, true},  // as if it had been the dialer
			{own, dHello, lProof, false}, // as if it had been the listener
		} {
			secret, err := sessionSecret(y, try.mine, try.theirs, try.dialer)
			if err != nil {
				t.Fatal(err)
			}
			if hmac.Equal(try.proof, proof(secret, try.dialer)) {
				t.Fatalf("the recorded exchange confirms %q", w)
			}
		}
	}
}

// TestListenerProvesNothingFirst dials a listener as a stranger with a
// guessed token and a forged proof: the listener refuses it having sent its
// hello (a random share) and the refusal (zeros), no proof.
func TestListenerProvesNothingFirst(t *testing.T) {
	for _, forged := range []string{"zeros", "made with a guess"} {
		t.Run(forged, func(t *testing.T) {
			stranger, listener := pair(t)
			errc := make(chan error, 1)
			go func() {
				errc <- Handshake(listener, []byte("hunter2"), Store, false, time.Now().Add(5*time.Second))
				listener.Close()
			}()
			y, own := share(t, []byte("hunter1"), Store)
			stranger.Write(own)
			theirHello := make([]byte, helloLen)
			if _, err := io.ReadFull(stranger, theirHello); err != nil {
				t.Fatal(err)
			}
			p := make([]byte, macLen)
			if forged != "zeros" {
				secret, err := sessionSecret(y, own, theirHello, true)
				if err != nil {
					t.Fatal(err)
				}
				p = proof(secret, true)
			}
			stranger.Write(p)
			if err := <-errc; !errors.Is(err, ErrDenied) {
				t.Fatalf("listener: %v, want %v", err, ErrDenied)
			}
			rest, err := io.ReadAll(stranger)
			if !bytes.Equal(rest, make([]byte, macLen)) {
				t.Fatalf("after refusing, the listener sent % x (%v), want only the refusal, %d zero bytes", rest, err, macLen)
			}
		})
	}
}

// TestHandshakeKey checks both ends get the same session key, a different one
// every connection, and one that is neither proof that crossed the wire.
func TestHandshakeKey(t *testing.T) {
	token := []byte("a token of at least sixteen bytes")
	seen := map[[KeyLen]byte]bool{}
	for i := 0; i < 3; i++ {
		ca, cb := pair(t)
		ra := &recorder{Conn: ca}
		deadline := time.Now().Add(5 * time.Second)
		type res struct {
			k   [KeyLen]byte
			err error
		}
		ch := make(chan res, 1)
		go func() { k, err := HandshakeKey(cb, token, Mesh, false, deadline); ch <- res{k, err} }()
		ka, err := HandshakeKey(ra, token, Mesh, true, deadline)
		if err != nil {
			t.Fatal(err)
		}
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		if ka != r.k {
			t.Fatal("the two ends derived different keys")
		}
		if seen[ka] || bytes.Contains(ra.sent(), ka[:]) || ka == sha256.Sum256(token) {
			t.Fatalf("key %x repeated or sent", ka)
		}
		seen[ka] = true
	}
}

// TestGeneratorOnCurve checks that hashing to the curve gives points whose
// shares other ends accept, for tokens of every kind, and distinct points
// for distinct tokens or services.
func TestGeneratorOnCurve(t *testing.T) {
	seen := map[string]string{}
	for _, w := range append(dictionary, "\x00", string(make([]byte, 300))) {
		for _, svc := range []Service{Store, Mesh, Join, QueuePair} {
			g, err := generator([]byte(w), svc)
			if err != nil {
				t.Fatalf("%q %v: %v", w, svc, err)
			}
			k := string(g.Bytes())
			if prev, ok := seen[k]; ok {
				t.Fatalf("%q %v maps to the point of %s", w, svc, prev)
			}
			seen[k] = w + "/" + svc.String()
		}
	}
}

// Package auth is the mutual handshake that opens every connection of a
// job: the rendezvous store's, the data mesh's, grun --join's and the RDMA
// connection manager's.
//
// # What it proves and what it leaks
//
// Both ends know the per-job token (grun makes 256 random bits; a person may
// set GRUN_TOKEN by hand, and a hand-set token is often a guessable word).
// The handshake proves to each end that the other holds the same token, and
// nothing that crosses the wire lets anyone who does not hold it test a guess
// offline: not an eavesdropper, and not a stranger who plays either end.
//
// A challenge-response with a MAC keyed by the token (what version 1 did)
// fails that: the MAC is a deterministic function of public nonces and the
// token, so one captured or provoked MAC lets an attacker try every word of
// a dictionary at leisure. An ephemeral key agreement with the token MACing
// the transcript stops the eavesdropper, but not a stranger who plays one
// end (it knows the agreed key, so the MAC again checks guesses), and the
// dialing end cannot choose not to speak first: a rank dials whatever holds
// MASTER_PORT, which a stranger may have bound first.
//
// So the token is used the way a PAKE (password-authenticated key exchange)
// uses a password, following CPace (draft-irtf-cfrg-cpace) on X25519:
//
//   - Both ends hash the token and the service to a point G of Curve25519
//     (Elligator 2, so every token maps to a point of the curve and not of
//     its twist, which would leak one bit per token).
//   - Each end picks a fresh random scalar y and sends Y = X25519(y, G) in
//     its hello. Y is a uniformly random element of the prime-order
//     subgroup whatever the token, so a hello says nothing about the token.
//   - Each computes K = X25519(y, Y_peer). Both get the same K only if they
//     used the same G, that is the same token. The session secret is
//     SHA-256 over K and both hellos, the dialer's first.
//   - The dialer sends a MAC of the transcript under that secret; the
//     listener checks it before it sends its own, so a stranger who dials
//     gets nothing but a refusal. The dialer then checks the listener's.
//
// A stranger who plays either end chose its own Y for one guessed G; to
// test a second guess against the same exchange it would have to solve a
// Diffie-Hellman problem. Each connection therefore tests at most one guess,
// online, where the listener sees and counts the refusal. Replays fail (both
// ends pick fresh scalars), and a proof cannot be reflected (the dialer's and
// the listener's proofs are labelled differently).
//
// Online guessing remains, so a hand-set GRUN_TOKEN must have at least
// MinTokenLen characters (bootstrap refuses shorter ones); grun's tokens have
// 64. Every step that handles the token runs in constant time (SHA-512, the
// hash-to-curve's field arithmetic in field.go, X25519), so a process of the
// same host timing handshakes learns the token's length in SHA-512 blocks
// and nothing else of it.
//
// Every message has a fixed size and is read under the deadline given to
// Handshake: a 40-byte hello each way (its 8-byte header checked before the
// rest is read), then a 32-byte proof each way; a refused dialer gets 32
// zero bytes.
package auth

import (
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Version is the wire protocol version; both ends must agree exactly.
// Version 2 is the password-authenticated key exchange described above;
// version 1 was a challenge-response that leaked guesses.
const Version = 2

// MinTokenLen is the fewest bytes a token set by hand may have. It bounds
// online guessing only: nothing captured from the wire tests a guess.
const MinTokenLen = 16

// KeyLen is the size of the session key HandshakeKey returns.
const KeyLen = 32

// Service names what a connection is for, so that a connection meant for the
// rendezvous store cannot be passed off to a data port and vice versa.
type Service uint16

const (
	Store Service = 1 // the rendezvous key/value store
	Mesh  Service = 2 // a data connection between two ranks
	Join  Service = 3 // grun --join asking a running grun for a seat
	// QueuePair is two ranks exchanging the numbers of an RDMA queue
	// pair, the connection manager of transport/rdma.
	QueuePair Service = 4
)

func (s Service) String() string {
	switch s {
	case Store:
		return "store"
	case Mesh:
		return "mesh"
	case Join:
		return "join"
	case QueuePair:
		return "queue pair"
	}
	return fmt.Sprintf("service(%d)", uint16(s))
}

var (
	// ErrDenied means the other end does not hold the job's token.
	ErrDenied = errors.New("authentication failed: wrong job token")
	// ErrProtocol means the other end does not speak this protocol
	// (wrong magic, version or service).
	ErrProtocol = errors.New("not a gocoll peer or wrong protocol version")
)

var magic = [4]byte{'G', 'C', 'O', 'L'}

const (
	shareLen = 32
	helloLen = 4 + 2 + 2 + shareLen
	macLen   = sha256.Size
)

// SentLen is how many bytes each end of a successful handshake sends:
// its hello, then its proof. What follows on the connection is the
// service's own.
const SentLen = helloLen + macLen

// Handshake authenticates conn in both directions. dialer tells which end
// this is. The deadline bounds the whole exchange, so a stranger that
// connects and says nothing cannot hold a slot for long. On success the
// connection's deadline is cleared.
//
// Both ends write their hello before reading the other's, so conn must
// buffer a few dozen bytes each way, as TCP and Unix sockets do; over an
// unbuffered net.Pipe the handshake stalls until the deadline.
func Handshake(conn net.Conn, token []byte, svc Service, dialer bool, deadline time.Time) error {
	_, err := HandshakeKey(conn, token, svc, dialer, deadline)
	return err
}

// HandshakeKey is Handshake that also returns a key both ends share and
// nobody else can compute, fresh for every connection (a recorded
// connection stays secret even if the token leaks later). It is derived
// apart from the proofs that crossed the wire, for keying encryption of the
// connection.
func HandshakeKey(conn net.Conn, token []byte, svc Service, dialer bool, deadline time.Time) ([KeyLen]byte, error) {
	var key [KeyLen]byte
	if err := conn.SetDeadline(deadline); err != nil {
		return key, err
	}
	g, err := generator(token, svc)
	if err != nil {
		return key, err
	}
	y, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return key, fmt.Errorf("auth: scalar: %w", err)
	}
	share, err := y.ECDH(g)
	if err != nil { // only if G were of low order, which hashing avoids
		return key, fmt.Errorf("auth: share: %w", err)
	}
	var hello [helloLen]byte
	copy(hello[:4], magic[:])
	binary.LittleEndian.PutUint16(hello[4:], Version)
	binary.LittleEndian.PutUint16(hello[6:], uint16(svc))
	copy(hello[8:], share)
	if _, err := conn.Write(hello[:]); err != nil {
		return key, fmt.Errorf("auth: send hello: %w", err)
	}
	// The header first: garbage is refused after 8 bytes.
	var theirHello [helloLen]byte
	if _, err := io.ReadFull(conn, theirHello[:8]); err != nil {
		return key, fmt.Errorf("auth: read hello: %w", err)
	}
	if err := checkHello(theirHello[:], svc); err != nil {
		return key, err
	}
	if _, err := io.ReadFull(conn, theirHello[8:]); err != nil {
		return key, fmt.Errorf("auth: read hello: %w", err)
	}
	secret, err := sessionSecret(y, hello[:], theirHello[:], dialer)
	if err != nil {
		return key, err
	}
	if dialer {
		if _, err := conn.Write(proof(secret, true)); err != nil {
			return key, fmt.Errorf("auth: send proof: %w", err)
		}
		if err := readProof(conn, secret, false); err != nil {
			return key, err
		}
	} else {
		// The listener proves nothing until the dialer has. Refused, it
		// says so with a proof of zeros, which no secret produces, so
		// that the dialer fails with ErrDenied rather than a hang-up.
		if err := readProof(conn, secret, true); err != nil {
			if errors.Is(err, ErrDenied) {
				conn.Write(make([]byte, macLen))
			}
			return key, err
		}
		if _, err := conn.Write(proof(secret, false)); err != nil {
			return key, fmt.Errorf("auth: send proof: %w", err)
		}
	}
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("gocoll session key"))
	copy(key[:], h.Sum(nil))
	return key, conn.SetDeadline(time.Time{})
}

// checkHello checks the fixed header of the peer's hello.
func checkHello(h []byte, svc Service) error {
	if [4]byte(h[:4]) != magic {
		return fmt.Errorf("auth: bad magic %q: %w", h[:4], ErrProtocol)
	}
	if v := binary.LittleEndian.Uint16(h[4:]); v != Version {
		return fmt.Errorf("auth: peer speaks version %d, this build speaks %d: %w", v, Version, ErrProtocol)
	}
	if s := Service(binary.LittleEndian.Uint16(h[6:])); s != svc {
		return fmt.Errorf("auth: peer wants %v, this end serves %v: %w", s, svc, ErrProtocol)
	}
	return nil
}

// sessionSecret is SHA-256 over the Diffie-Hellman result and both hellos,
// the dialer's first, so both ends hash the same transcript.
func sessionSecret(y *ecdh.PrivateKey, mine, theirs []byte, dialer bool) ([]byte, error) {
	peer, err := ecdh.X25519().NewPublicKey(theirs[8:])
	if err != nil {
		return nil, fmt.Errorf("auth: peer's share: %v: %w", err, ErrDenied)
	}
	k, err := y.ECDH(peer)
	if err != nil { // a low-order point: no proof can follow
		return nil, fmt.Errorf("auth: peer's share: %v: %w", err, ErrDenied)
	}
	d, l := mine, theirs
	if !dialer {
		d, l = theirs, mine
	}
	h := sha256.New()
	h.Write([]byte("gocoll cpace x25519 v2"))
	h.Write(k)
	h.Write(d)
	h.Write(l)
	return h.Sum(nil), nil
}

// proof is one end's key confirmation, labelled with its role.
func proof(secret []byte, dialer bool) []byte {
	h := hmac.New(sha256.New, secret)
	if dialer {
		h.Write([]byte("dialer"))
	} else {
		h.Write([]byte("listener"))
	}
	return h.Sum(nil)
}

func readProof(conn net.Conn, secret []byte, fromDialer bool) error {
	var got [macLen]byte
	if _, err := io.ReadFull(conn, got[:]); err != nil {
		return fmt.Errorf("auth: read proof: %w", err)
	}
	if !hmac.Equal(got[:], proof(secret, fromDialer)) {
		return fmt.Errorf("auth: %w", ErrDenied)
	}
	return nil
}

// generator hashes the token and the service to a point of Curve25519 with
// Elligator 2 (RFC 9380, section 6.7.1, Z = 2): r from a 512-bit hash,
// x1 = -A/(1+2r²) (-A where 1+2r² is 0); x = x1 when x1³+Ax1²+x1 is a
// square or 0, else -x1-A. Either way x is the u-coordinate of a point of
// the curve, never of the twist. It runs in constant time (field.go): what
// it computes is the token's secret stand-in, and timings that depended on
// it would let a process on the host sort dictionary words offline.
func generator(token []byte, svc Service) (*ecdh.PublicKey, error) {
	r := feFromHash(generatorHash(token, svc))
	montA := fe{486662}
	minusA := feSub(fe{}, montA)
	den := feAdd(feMul(fe{2}, feMul(r, r)), fe{1})
	x := feSelect(minusA, feMul(minusA, feInvert(den)), feEqual(den, fe{}))
	gx := feMul(feAdd(feMul(feAdd(x, montA), x), fe{1}), x) // x³+Ax²+x = x((x+A)x+1)
	// Euler's criterion gives 1, 0 or -1; only a non-square (-1) flips.
	nonSquare := feEqual(feLegendre(gx), feSub(fe{}, fe{1}))
	x = feSelect(feSub(minusA, x), x, nonSquare)
	u := x.bytes()
	g, err := ecdh.X25519().NewPublicKey(u[:])
	if err != nil {
		return nil, fmt.Errorf("auth: generator: %w", err)
	}
	return g, nil
}

// generatorHash is the 512-bit hash of the token and the service that
// generator maps to the curve.
func generatorHash(token []byte, svc Service) []byte {
	h := sha512.New()
	h.Write([]byte("gocoll cpace generator v2"))
	var s [2]byte
	binary.LittleEndian.PutUint16(s[:], uint16(svc))
	h.Write(s[:])
	h.Write(token)
	return h.Sum(nil)
}

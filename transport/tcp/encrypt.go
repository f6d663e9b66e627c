package tcp

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// Encryption in transit (Options.Encrypt, GOCOLL_ENCRYPT=1).
//
// Each connection gets two fresh AES-256-GCM keys, one per direction,
// derived with HKDF-SHA256 from the session key of its authentication
// (auth.HandshakeKey: an X25519 agreement the job token authenticates,
// never on the wire, so a recorded connection stays sealed even if the
// token leaks later) and both ends' hellos, each of which carries 16
// random bytes: a key never outlives its connection,
// so a pair of ranks that links again (a replacement rank, another
// communicator, another job sharing the token) starts from new keys, and
// a nonce is simply the count of frames sent so far in that direction.
// The receiver counts too and never reads a nonce off the wire: a frame
// replayed, dropped or moved fails its tag like a tampered one.
//
// A sealed frame is the 12-byte header in the clear (bound to the frame
// as additional data: lengths and slots are what TCP shows anyway), the
// payload encrypted, and a 16-byte tag. Credit, goodbye and abort frames
// carry a tag too, so nothing a peer acts on is taken unauthenticated.

const (
	tagLen   = 16
	nonceLen = 12
	saltLen  = 16

	// helloEncrypt is the hello flag of a rank that seals its frames.
	helloEncrypt = 1
)

var (
	// ErrNoToken is wrapped by Connect's error when Options.Encrypt is
	// set without a token to derive keys from: neither GRUN_TOKEN nor
	// the secret a tokenless job's store hands its ranks.
	ErrNoToken = errors.New("encryption needs a token for the links, and there is none")
	// ErrEncryptMismatch is wrapped by the error of a link refused
	// because one end encrypts and the other does not.
	ErrEncryptMismatch = errors.New("ranks disagree on GOCOLL_ENCRYPT")
	// ErrFrameAuth is wrapped, with transport.ErrPeerLost, by the loss
	// of a peer whose frame failed authentication: altered, replayed,
	// dropped or reordered in transit.
	ErrFrameAuth = errors.New("frame failed authentication")
)

// sealer is one direction of a sealed link: its AEAD and the count of
// frames sealed (or opened) so far, which is the next nonce.
type sealer struct {
	aead  cipher.AEAD
	seq   uint64
	nonce [nonceLen]byte
}

// next returns the nonce of the next frame and counts it.
func (s *sealer) next() []byte {
	binary.LittleEndian.PutUint64(s.nonce[4:], s.seq)
	s.seq++
	return s.nonce[:]
}

// hkdfKey is HKDF-SHA256 (RFC 5869) of secret, salt and info, 32 bytes
// long: an AES-256 key.
func hkdfKey(secret, salt []byte, info string) ([]byte, error) {
	return hkdf.Key(sha256.New, secret, salt, info, 32)
}

// linkKeys are the two directions of one connection, from this end.
type linkKeys struct {
	send, recv *sealer
}

// newSalt is the random part of a hello.
func newSalt() ([saltLen]byte, error) {
	var s [saltLen]byte
	_, err := rand.Read(s[:])
	return s, err
}

// deriveKeys derives both directions' keys of a connection between
// ranks me and peer. dialerHello and listenerHello are the hellos as sent,
// which bind the keys to the pair, the job size, the communicator and
// both ends' random salts.
func deriveKeys(secret, dialerHello, listenerHello []byte, me, peer int) (*linkKeys, error) {
	salt := make([]byte, 0, len(dialerHello)+len(listenerHello))
	salt = append(append(salt, dialerHello...), listenerHello...)
	send, err := newSealer(secret, salt, me, peer)
	if err != nil {
		return nil, err
	}
	recv, err := newSealer(secret, salt, peer, me)
	if err != nil {
		return nil, err
	}
	return &linkKeys{send: send, recv: recv}, nil
}

// newSealer keys the direction from rank from to rank to.
func newSealer(secret, salt []byte, from, to int) (*sealer, error) {
	info := fmt.Sprintf("gocoll tcp frame key v2: rank %d to rank %d", from, to)
	key, err := hkdfKey(secret, salt, info)
	if err != nil {
		return nil, fmt.Errorf("tcp: link key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("tcp: link cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("tcp: link cipher: %w", err)
	}
	return &sealer{aead: aead}, nil
}

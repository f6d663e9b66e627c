// Package auth is the mutual challenge-response handshake that opens every
// connection of a job: the rendezvous store's and the data mesh's.
//
// Both ends know the per-job token that grun generated. Each sends a hello
// with a fresh random nonce, then proves knowledge of the token with an
// HMAC-SHA256 over both nonces, the service and its own role. The token
// itself never crosses the wire, a recorded exchange cannot be replayed
// (the nonces differ every time), and a MAC cannot be reflected back at its
// sender (the role is part of what is signed).
package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Version is the wire protocol version; both ends must agree exactly.
const Version = 1

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
	nonceLen = 16
	helloLen = 4 + 2 + 2 + nonceLen
	macLen   = sha256.Size
)

// Handshake authenticates conn in both directions. dialer tells which end
// this is. The deadline bounds the whole exchange, so a stranger that
// connects and says nothing cannot hold a slot for long. On success the
// connection's deadline is cleared.
//
// Both ends write each message before reading the other's, so conn must
// buffer a few dozen bytes each way, as TCP and Unix sockets do; over an
// unbuffered net.Pipe the handshake stalls until the deadline.
func Handshake(conn net.Conn, token []byte, svc Service, dialer bool, deadline time.Time) error {
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	var hello [helloLen]byte
	copy(hello[:4], magic[:])
	binary.LittleEndian.PutUint16(hello[4:], Version)
	binary.LittleEndian.PutUint16(hello[6:], uint16(svc))
	mine := hello[8:]
	if _, err := rand.Read(mine); err != nil {
		return fmt.Errorf("auth: nonce: %w", err)
	}
	if _, err := conn.Write(hello[:]); err != nil {
		return fmt.Errorf("auth: send hello: %w", err)
	}
	var theirHello [helloLen]byte
	if _, err := io.ReadFull(conn, theirHello[:]); err != nil {
		return fmt.Errorf("auth: read hello: %w", err)
	}
	if [4]byte(theirHello[:4]) != magic {
		return fmt.Errorf("auth: bad magic %q: %w", theirHello[:4], ErrProtocol)
	}
	if v := binary.LittleEndian.Uint16(theirHello[4:]); v != Version {
		return fmt.Errorf("auth: peer speaks version %d, this build speaks %d: %w", v, Version, ErrProtocol)
	}
	if s := Service(binary.LittleEndian.Uint16(theirHello[6:])); s != svc {
		return fmt.Errorf("auth: peer wants %v, this end serves %v: %w", s, svc, ErrProtocol)
	}
	theirs := theirHello[8:]

	if _, err := conn.Write(mac(token, svc, dialer, mine, theirs)); err != nil {
		return fmt.Errorf("auth: send proof: %w", err)
	}
	var got [macLen]byte
	if _, err := io.ReadFull(conn, got[:]); err != nil {
		return fmt.Errorf("auth: read proof: %w", err)
	}
	// The peer signed with its own nonce first and its own role.
	if !hmac.Equal(got[:], mac(token, svc, !dialer, theirs, mine)) {
		return fmt.Errorf("auth: %w", ErrDenied)
	}
	return conn.SetDeadline(time.Time{})
}

func mac(token []byte, svc Service, dialer bool, own, other []byte) []byte {
	h := hmac.New(sha256.New, token)
	var hdr [4]byte
	binary.LittleEndian.PutUint16(hdr[:], uint16(svc))
	if dialer {
		hdr[2] = 'D'
	} else {
		hdr[2] = 'L'
	}
	h.Write(magic[:])
	h.Write(hdr[:])
	h.Write(own)
	h.Write(other)
	return h.Sum(nil)
}

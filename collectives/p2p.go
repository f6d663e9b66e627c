package collectives

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

// ErrTruncated reports a point-to-point message longer than the buffer
// posted for it. The message is consumed (the lane stays in step) and the
// buffer holds its start.
var ErrTruncated = errors.New("message longer than the receive buffer")

// MaxTag is the largest point-to-point tag.
const MaxTag = 1<<31 - 2

// p2pLen is the length prefix of a point-to-point message's first segment.
const p2pLen = 8

type p2pKey struct {
	peer, tag int
	recv      bool
}

// p2pLock serialises whole messages on one (peer, tag, direction), so
// that the segments of two messages never interleave within a lane.
type p2pLocks struct {
	mu sync.Mutex
	m  map[p2pKey]chan struct{}
}

func (l *p2pLocks) get(k p2pKey) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[p2pKey]chan struct{}{}
	}
	ch := l.m[k]
	if ch == nil {
		ch = make(chan struct{}, 1)
		l.m[k] = ch
	}
	return ch
}

func (c *Channel) lockP2P(ctx context.Context, k p2pKey) (func(), error) {
	ch := c.locks.get(k)
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func checkTag(tag int) error {
	if tag < 0 || tag > MaxTag {
		return fmt.Errorf("tag %d out of range [0, %d]: %w", tag, MaxTag, ErrInvalid)
	}
	return nil
}

// SendTagged sends p to member peer with tag, as one message of any
// length: the first segment carries the length, the rest follow in
// slot-sized segments. Messages to one (peer, tag) arrive in the order
// their sends began.
func (c *Channel) SendTagged(ctx context.Context, peer, tag int, p []byte) error {
	if err := checkTag(tag); err != nil {
		return err
	}
	if _, err := c.peer(peer, "send to"); err != nil {
		return err
	}
	unlock, err := c.lockP2P(ctx, p2pKey{peer, tag, false})
	if err != nil {
		return fmt.Errorf("send to rank %d tag %d: waiting for the previous send: %w", peer, tag, err)
	}
	defer unlock()
	mx := c.MaxMessage()
	first := make([]byte, p2pLen+min(len(p), mx-p2pLen))
	binary.LittleEndian.PutUint64(first, uint64(len(p)))
	n := copy(first[p2pLen:], p)
	ln := uint32(tag) + 1
	if err := c.send(ctx, peer, ln, nil, first); err != nil {
		return err
	}
	for rest := p[n:]; len(rest) > 0; {
		k := min(len(rest), mx)
		if err := c.send(ctx, peer, ln, nil, rest[:k]); err != nil {
			return err
		}
		rest = rest[k:]
	}
	return nil
}

// RecvTagged receives the next message from member peer with tag into
// buf and returns its length. A message longer than buf is consumed
// whole, its start kept in buf, and reported with ErrTruncated.
func (c *Channel) RecvTagged(ctx context.Context, peer, tag int, buf []byte) (int, error) {
	if err := checkTag(tag); err != nil {
		return 0, err
	}
	if _, err := c.peer(peer, "recv from"); err != nil {
		return 0, err
	}
	unlock, err := c.lockP2P(ctx, p2pKey{peer, tag, true})
	if err != nil {
		return 0, fmt.Errorf("recv from rank %d tag %d: waiting for the previous receive: %w", peer, tag, err)
	}
	defer unlock()
	ln := uint32(tag) + 1
	msg, err := c.recv(ctx, peer, ln)
	if err != nil {
		return 0, err
	}
	if len(msg.Data) < p2pLen {
		c.Release(msg)
		return 0, fmt.Errorf("recv from rank %d tag %d: %d-byte message without its length: %w", peer, tag, len(msg.Data), ErrMismatch)
	}
	total := int(binary.LittleEndian.Uint64(msg.Data))
	got := copy(buf, msg.Data[p2pLen:])
	left := total - (len(msg.Data) - p2pLen)
	c.Release(msg)
	for left > 0 {
		msg, err := c.recv(ctx, peer, ln)
		if err != nil {
			return got, err
		}
		if len(msg.Data) == 0 || len(msg.Data) > left {
			c.Release(msg)
			return got, fmt.Errorf("recv from rank %d tag %d: segment of %d bytes where %d remained: %w", peer, tag, len(msg.Data), left, ErrMismatch)
		}
		got += copy(buf[got:], msg.Data)
		left -= len(msg.Data)
		c.Release(msg)
	}
	if total > len(buf) {
		return got, fmt.Errorf("recv from rank %d tag %d: %d-byte message, %d-byte buffer: %w", peer, tag, total, len(buf), ErrTruncated)
	}
	return total, nil
}

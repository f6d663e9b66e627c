package shm

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gocoll/gocoll/transport"
)

// Hybrid is one transport for a job spread over several hosts: it routes
// each peer on this host through a shared-memory mesh and every other
// peer through a network mesh (TCP or RDMA) that spans the whole job. The
// algorithms see one transport of Size ranks and need not know; the
// host-aware ones (collectives.Options.Hosts) keep most traffic on the
// shared-memory side.
//
// The routing is per peer, decided by the local ranks alone: every rank
// not among them, including ranks past Size that the far mesh admits
// later (tcp.Options.Spare: replacements joining an elastic job), goes
// through the far mesh. So an elastic job on one host is a Hybrid too:
// shared memory among its ranks, and a TCP mesh, linked on demand, that
// carries nothing until a replacement, which has no shared memory with
// anyone, links to it (see Capacity). The near mesh need not be shared
// memory: an elastic job over RDMA (or shm+rdma, itself a Hybrid) is a
// Hybrid whose near mesh is that transport, spanning every rank of the
// job, and whose far mesh is such a TCP mesh, for the replacements alone.
type Hybrid struct {
	rank, size int
	near       transport.Transport
	nearParts  transport.PartSender     // near's, or nil
	nearCredit transport.CreditReporter // near's, or nil
	local      []int                    // local[i] is the job rank of near's rank i
	identity   bool                     // local[i] == i: near's ranks are the job's
	index      []int                    // index[r] is r's rank in near, or -1 off this host
	far        transport.Transport
	maxMsg     int

	closeOnce sync.Once
	closed    chan struct{}
	lostOnce  sync.Once
	lost      chan struct{}
	lostErr   error
	watcher   sync.WaitGroup
}

// NewHybrid combines near, the shared-memory mesh among the job ranks
// local (ascending order, this rank among them, near's rank i being
// local[i]), with far, a mesh of the whole job. The Hybrid owns both.
//
// near may be any transport, its ranks the job ranks local: a Hybrid
// that routes the job's ranks through one transport and the ranks past
// its size, which far admits (tcp.Options.Spare), through far has as
// near a mesh of every rank of the job, local listing them all.
func NewHybrid(near transport.Transport, local []int, far transport.Transport) (*Hybrid, error) {
	rank, size := far.Rank(), far.Size()
	if near.Size() != len(local) || near.Rank() >= len(local) || local[near.Rank()] != rank {
		return nil, fmt.Errorf("shm: hybrid: rank %d is not rank %d of the local ranks %v", rank, near.Rank(), local)
	}
	h := &Hybrid{rank: rank, size: size, near: near, local: local, index: make([]int, size), far: far,
		maxMsg: min(near.MaxMessage(), far.MaxMessage()), closed: make(chan struct{}), lost: make(chan struct{})}
	for r := range h.index {
		h.index[r] = -1
	}
	for i, r := range local {
		if r < 0 || r >= size || h.index[r] >= 0 || i > 0 && r <= local[i-1] {
			return nil, fmt.Errorf("shm: hybrid: local ranks %v are not ascending ranks of a job of %d", local, size)
		}
		h.index[r] = i
	}
	h.identity = local[len(local)-1] == len(local)-1
	h.nearParts, _ = near.(transport.PartSender)
	h.nearCredit, _ = near.(transport.CreditReporter)
	var farLost, nearLost <-chan struct{}
	ln, _ := far.(transport.LossNotifier)
	if ln != nil {
		farLost = ln.Lost()
	}
	nln, _ := near.(transport.LossNotifier)
	if nln != nil {
		nearLost = nln.Lost()
	}
	h.watcher.Add(1)
	go func() {
		defer h.watcher.Done()
		var err error
		select {
		case <-nearLost:
			err = h.global(nln.LostErr())
		case <-farLost:
			err = ln.LostErr()
		case <-h.closed:
			return
		}
		h.lostOnce.Do(func() {
			h.lostErr = err
			close(h.lost)
		})
	}()
	return h, nil
}

// global renames near's peer in err to its job rank.
func (h *Hybrid) global(err error) error {
	if err == nil || h.identity {
		return err
	}
	if l, ok := err.(transport.Losses); ok {
		g := make(transport.Losses, len(l))
		for i, pe := range l {
			g[i] = pe
			if pe.Peer >= 0 && pe.Peer < len(h.local) {
				g[i] = &transport.PeerError{Peer: h.local[pe.Peer], Op: pe.Op, Err: pe.Err}
			}
		}
		return g
	}
	var pe *transport.PeerError
	if errors.As(err, &pe) && pe.Peer >= 0 && pe.Peer < len(h.local) {
		return &transport.PeerError{Peer: h.local[pe.Peer], Op: pe.Op, Err: pe.Err}
	}
	return err
}

// Rank implements transport.Transport.
func (h *Hybrid) Rank() int { return h.rank }

// Size implements transport.Transport.
func (h *Hybrid) Size() int { return h.size }

// MaxMessage implements transport.Transport: the smaller of the two
// meshes', so that an algorithm's segments fit either.
func (h *Hybrid) MaxMessage() int { return h.maxMsg }

// Capacity is how many job ranks may hold links here: the far mesh's
// capacity, when it admits ranks past Size (tcp.Transport.Capacity), or
// Size. collectives.NewMux sizes its peers by it.
func (h *Hybrid) Capacity() int {
	if c, ok := h.far.(interface{ Capacity() int }); ok && c.Capacity() > h.size {
		return c.Capacity()
	}
	return h.size
}

// Local reports whether peer is reached through shared memory.
func (h *Hybrid) Local(peer int) bool { return peer >= 0 && peer < h.size && h.index[peer] >= 0 }

// Send implements transport.Transport.
func (h *Hybrid) Send(ctx context.Context, peer int, p []byte) error {
	if peer >= 0 && peer < h.size && peer != h.rank && h.index[peer] >= 0 {
		if err := h.fits(peer, len(p)); err != nil {
			return err
		}
		return h.global(h.near.Send(ctx, h.index[peer], p))
	}
	return h.far.Send(ctx, peer, p)
}

// fits checks a message of n bytes to a local peer against the limit
// every rank shares (MaxMessage), which may be below the ring's slot.
func (h *Hybrid) fits(peer, n int) error {
	if n > h.maxMsg {
		return fmt.Errorf("shm: send of %d bytes to rank %d exceeds the %d-byte message limit", n, peer, h.maxMsg)
	}
	return nil
}

// SendParts implements transport.PartSender: over shared memory as the
// local transport does; to the other hosts' ranks as the far transport
// does, if it can, else not at all (false), which leaves the caller to
// send the usual way.
func (h *Hybrid) SendParts(ctx context.Context, peer int, head, body []byte, wait bool) (bool, error) {
	if peer >= 0 && peer < h.size && peer != h.rank && h.index[peer] >= 0 {
		if err := h.fits(peer, len(head)+len(body)); err != nil {
			return false, err
		}
		if h.nearParts == nil {
			return false, nil
		}
		sent, err := h.nearParts.SendParts(ctx, h.index[peer], head, body, wait)
		return sent, h.global(err)
	}
	if ps, ok := h.far.(transport.PartSender); ok {
		return ps.SendParts(ctx, peer, head, body, wait)
	}
	return false, nil
}

// Register implements transport.Registrar with whichever of the two
// meshes can send from registered memory (RDMA, near or far; shared
// memory and TCP copy anyway).
func (h *Hybrid) Register(p []byte) (deregister func() error, err error) {
	dn, err := transport.Register(h.near, p)
	if err != nil {
		return nil, err
	}
	df, err := transport.Register(h.far, p)
	if err != nil {
		dn()
		return nil, err
	}
	return func() error { return errors.Join(df(), dn()) }, nil
}

// HasCredit implements transport.CreditReporter.
func (h *Hybrid) HasCredit(peer int) bool {
	if peer >= 0 && peer < h.size && peer != h.rank && h.index[peer] >= 0 {
		if h.nearCredit == nil {
			return false
		}
		return h.nearCredit.HasCredit(h.index[peer])
	}
	if cr, ok := h.far.(transport.CreditReporter); ok {
		return cr.HasCredit(peer)
	}
	return false
}

// Recv implements transport.Transport.
func (h *Hybrid) Recv(ctx context.Context, peer int) (transport.Message, error) {
	if peer >= 0 && peer < h.size && peer != h.rank && h.index[peer] >= 0 {
		m, err := h.near.Recv(ctx, h.index[peer])
		if err != nil {
			return m, h.global(err)
		}
		m.Peer = int32(peer)
		return m, nil
	}
	return h.far.Recv(ctx, peer)
}

// Release implements transport.Transport.
func (h *Hybrid) Release(m transport.Message) {
	if p := int(m.Peer); p >= 0 && p < h.size && p != h.rank && h.index[p] >= 0 {
		m.Peer = int32(h.index[p])
		h.near.Release(m)
		return
	}
	h.far.Release(m)
}

// Lost implements transport.LossNotifier: the first loss on either mesh.
func (h *Hybrid) Lost() <-chan struct{} { return h.lost }

// LostErr implements transport.LossNotifier.
func (h *Hybrid) LostErr() error {
	select {
	case <-h.lost:
		return h.lostErr
	default:
		return nil
	}
}

// Close implements transport.Transport.
func (h *Hybrid) Close() error {
	return h.stop(func(t transport.Transport) error { return t.Close() })
}

// Abort implements transport.Aborter, on both meshes (the far one by
// Close if it cannot abort).
func (h *Hybrid) Abort(cause error) error {
	return h.stop(func(t transport.Transport) error { return transport.Abort(t, cause) })
}

func (h *Hybrid) stop(how func(transport.Transport) error) error {
	var err error
	h.closeOnce.Do(func() {
		close(h.closed)
		err = errors.Join(how(h.near), how(h.far))
		h.watcher.Wait()
	})
	return err
}

var (
	_ transport.Transport    = (*Hybrid)(nil)
	_ transport.Aborter      = (*Hybrid)(nil)
	_ transport.LossNotifier = (*Hybrid)(nil)
	_ transport.Registrar    = (*Hybrid)(nil)
)

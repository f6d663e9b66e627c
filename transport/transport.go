// Package transport defines the one interface the collective algorithms are
// written against, and the errors every transport reports.
//
// The model is the one RDMA hardware imposes, so that TCP and shared memory
// fit under it without changing an algorithm: every rank owns, for each peer
// it is linked to, a receive slab cut into a fixed number of slots of
// MaxMessage bytes. Every transport (tcp, shm, rdma) makes a link when a
// call first needs that peer, so a rank holds slabs only for the partners
// its algorithms use; each has an option to link every pair at Connect
// instead. A send fills the next slot of the receiver's slab (over RDMA, a
// WRITE with immediate; over shared memory, a copy into the ring; over
// TCP, a frame that the receiver's waiting call reads off the socket
// straight into the slot: tcp has no reader goroutine);
// the receiver is told "slot k of peer p holds n bytes", reduces or copies
// out of the slot in place, and releases it, which returns a credit to the
// sender. A sender with no credit left waits. Because receive memory is
// bounded and allocated with the connection, nothing is allocated per message and a fast
// sender can never overrun a slow receiver.
//
// Links on demand are made the same way in every transport, by one link
// core (internal/mesh): a rank listens on one address, published once in
// the rendezvous store, and admits whoever dials it for as long as it is
// open (at most 256 authenticating at once; strangers refused, counted,
// and logged in summary); the first Send or Recv that needs a peer dials
// it. Either end may dial first; when both do at once, the higher rank's
// connection is kept and the other declined, so each pair has one link. A
// peer that cannot be reached (it died, gave up, or never published its
// address) is lost, like one whose link broke. The transports plug their
// own steps into the core: how to dial, the handshake (the job token of
// internal/auth, then hellos checking size, slots and namespace), and
// what a link is once made (a socket in tcp's poll list, a pair of rings,
// a queue pair). Options every transport takes are LinkOptions.
//
// The transports name their files alike, by concept, as Gloo names pair,
// device and context in each of its transports, so that a reader who
// knows one finds the same thing in the others: doc.go (the design),
// options.go (Options: LinkOptions and the transport's own), links.go
// (links on demand: dial, handshake, admit), and the package's own name
// (tcp.go, shm.go, rdma.go: Connect, the contract's methods, Close,
// Abort); the data path has names of its own (tcp's engine, shm's ring,
// rdma's verbs and registered memory).
//
// Contract, for every implementation:
//
//   - Ordering: messages from one peer are delivered in the order they were
//     sent. There is no ordering between different peers.
//   - Concurrency: at most one goroutine sends to a given peer at a time, and
//     at most one receives from it; sends and receives to the same or
//     different peers may run concurrently. Release may be called from any
//     goroutine, but the messages of one peer must be released in the order
//     they were received.
//   - Buffers: Send does not retain p; when it returns p may be reused.
//     A received Message's Data belongs to the caller until Release, and must
//     not be touched afterwards: the slot is then refilled by the peer.
//   - Sizes: 0 <= len(p) <= MaxMessage(). Zero-length messages are delivered.
//   - Cancellation: Send and Recv return ctx.Err() (wrapped) promptly when ctx
//     ends. A Send cancelled part-way may leave the stream to that peer
//     unusable; the transport then reports the peer broken on later calls.
//   - Peer loss: when a peer's connection fails or the peer dies, every
//     pending and later Send and Recv involving it returns an error wrapping
//     ErrPeerLost that names the peer's rank (a *PeerError). Messages the
//     peer had already delivered can still be received first. A peer never
//     linked is lost when the first call that needs it cannot reach it.
//   - Peers: the ranks [0, Size), this one excepted. A transport that can
//     admit ranks started after it (tcp.Options.Spare, for the
//     replacements that join an elastic job) has a Capacity() int method
//     saying how many ranks past Size it takes, [Size, Capacity); with
//     them every rule above holds as with any peer, links being made as
//     calls first need them. Routing transports (shm.Hybrid) send those
//     ranks through the mesh that admits them and report its Capacity.
//   - Close releases every resource (connections, slabs, goroutines), wakes
//     pending calls with ErrClosed, and is safe to call more than once.
//
// Beyond the contract, five optional interfaces, each found by a type
// assertion, let a transport offer what only some can; the mux
// (collectives.Mux) and the communicator use them where present and do
// without otherwise:
//
//	               tcp  shm  rdma  shm.Hybrid  why
//	LossNotifier    x    x    x     x          a loss anywhere fails the running call at once, not when it next reads that peer
//	Aborter         x    x    x     x          a broken rank drops its links so peers learn at once, not after a linger
//	CreditReporter  x    x    x     x          the mux sends only when a slot is free, reading meanwhile instead of blocking
//	PartSender      x    x    x     x          header and payload go straight into the slot (tcp: one writev): one copy less per message
//	Registrar                 x     x          memory registered once is sent from without a copy into a registered buffer
//
// tcp has no Registrar, having nothing to register: its writev already
// reads the caller's memory.
// Hybrid forwards each to the transport that carries the peer.
//
// What is public, and why. A communicator (package comm) builds its own
// transports and takes none from the program; the transport packages are
// public for three uses, each with the contract above: their Options
// tune a communicator's (comm.WithTCPOptions, comm.WithSHMOptions), a
// communicator's errors wrap their errors (ErrPeerLost, *PeerError), and
// a program that brings a transport of its own, one that keeps this
// contract, runs gocoll's algorithms over it through collectives.Group
// (see its example). tcp.Connect, shm.Connect and rdma.Connect give a
// program the point-to-point layer alone. The counters that only the
// tests read (links made, connections refused, address look-ups) are in
// each package's export_test.go: a program learns of refused strangers
// from the log (internal/gate), which says who and why. The link core
// the transports share (internal/mesh) is internal: it is how these
// three are built, not a way to build a fourth.
package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Transport is one rank's connections to every other rank of a job.
// Store is the part of the rendezvous client (bootstrap.Client) a
// transport needs to find its peers: each rank puts its address under a
// key of its own and gets the others'. Get waits until the key is put.
type Store interface {
	Put(ctx context.Context, key string, value []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
}

// Headroom is what the transports' default slot sizes add to a power of
// two: room for the headers the layers above put in front of a payload
// (the collectives' mux and call headers, 48 bytes, to a cache line), so
// that a power-of-two piece of a buffer, which is what splitting a
// power-of-two buffer among 2, 4 or 8 ranks gives, travels in one
// message and not in a full one and a sliver.
const Headroom = 64

type Transport interface {
	// Rank is this process's rank, in [0, Size).
	Rank() int
	// Size is the number of ranks in the job.
	Size() int
	// MaxMessage is the largest payload one Send may carry: the slot size.
	MaxMessage() int
	// Send delivers p into the next free slot of peer's receive slab,
	// waiting for a credit if every slot is in use.
	Send(ctx context.Context, peer int, p []byte) error
	// Recv waits for the next message from peer.
	Recv(ctx context.Context, peer int) (Message, error)
	// Release hands m's slot back to its sender.
	Release(m Message)
	// Close tears the transport down. See the package contract.
	Close() error
}

// LossNotifier is implemented by transports that notice the loss of any
// peer as it happens, whichever peers the pending calls involve. A
// collective waiting on a live rank that itself waits on the lost one
// would otherwise only fail when that rank gives up; with this, the
// communicator fails at once and drops its connections, and the failure
// spreads through the job in one hop per rank.
type LossNotifier interface {
	// Lost is closed when the first peer is lost: died, reset or aborted
	// its connection, or broke the protocol. A peer that closed in good
	// order (ErrPeerClosed) is not lost: it may simply have finished
	// first. Close never closes it.
	Lost() <-chan struct{}
	// LostErr says which peer was lost and why, once Lost is closed: a
	// *PeerError wrapping ErrPeerLost, or, where the transport tracks
	// more than the first loss, Losses listing every peer lost by the
	// time of the call, first noticed first. A rank that gives up because
	// another died is lost too, so it takes the whole list to name the
	// rank that died.
	LostErr() error
}

// Aborter is implemented by transports that can drop every connection at
// once, without Close's orderly goodbye, so that every peer sees this rank
// as lost (ErrPeerLost), not as gone in good order. A communicator that
// breaks or is aborted uses it: its peers must stop waiting for it.
// The transport tells the peers cause where it can (best effort: never at
// the price of waiting), so that a rank that gives up because another died
// does not get blamed for the death: each peer's ErrPeerLost then carries
// cause's text. Abort releases what Close would; a later Close does
// nothing.
type Aborter interface {
	Abort(cause error) error
}

// CreditReporter is implemented by transports that can say whether a Send
// to peer would find a free slot there at once. A Send without one waits
// until the peer releases a slot, which only a receiver on the peer's side
// does; a layer that shares the transport between several users
// (collectives.Mux) uses the answer to keep receiving while it waits, so
// that two ranks each waiting for the other's credits still move. Call it
// only from the goroutine that would send to peer. A failed or closed peer
// reports true: Send then says what went wrong.
type CreditReporter interface {
	HasCredit(peer int) bool
}

// PartSender is implemented by transports that can send a message given
// in two parts. SendParts sends head followed by body as one message to
// peer, copied straight into the slot (or read from registered memory;
// see Registrar), so that a layer that prefixes a header of its own
// (collectives.Mux) need not first join the two in a buffer of its own:
// one copy of every byte fewer. With wait, it waits for a credit as Send
// does; without, it sends only if a slot is free at once, and otherwise
// sends nothing and reports sent false, which also spares the caller a
// HasCredit call. Either way, sent false with no error may also mean the
// transport cannot send to that peer in parts: the caller then sends the
// usual way. Its errors are Send's, and so are its rules: one goroutine
// sends to a peer at a time, and neither part is retained.
type PartSender interface {
	SendParts(ctx context.Context, peer int, head, body []byte, wait bool) (sent bool, err error)
}

// StepCoster is implemented by transports on which every message costs
// markedly more than its bytes (TCP: system calls, and wake-ups when
// ranks outnumber cores), so that the algorithms should take fewer,
// longer steps. It is a hint for the job's plan, which takes the
// costliest any rank's transport reports, once, at Init: the algorithm
// of a call must not depend on a rank's own transport, or ranks linked
// differently (an elastic job's replacement, over TCP, among members
// over shared memory) would choose differently.
type StepCoster interface {
	StepCostly() bool
}

// StepCostly says whether t is a StepCoster that reports costly steps.
func StepCostly(t Transport) bool {
	s, ok := t.(StepCoster)
	return ok && s.StepCostly()
}

// Registrar is implemented by transports that can send straight from
// memory registered with them ahead of time, as NCCL's ncclCommRegister
// does: a large Send whose data lies inside a registered region is read
// by the device from there, without the copy into the transport's own
// memory that a Send otherwise makes (over RDMA, into a staging slot).
// Such a Send returns once the device has read the data, which is what
// keeps p free for the caller on return.
//
// Register pins p (Go memory stays where it is and stays allocated until
// deregistered, even if the caller drops it) and registers it; deregister
// undoes that, waiting for any send still reading from p, and is safe to
// call more than once. Close deregisters what is left. Memory that is not
// the Go heap's (an mmap of the caller's, C memory) must stay mapped until
// deregister returns: the device holds its pages.
type Registrar interface {
	Register(p []byte) (deregister func() error, err error)
}

// Register registers p with t as a Registrar does; a transport that is
// not one registers nothing, and its deregister does nothing.
func Register(t Transport, p []byte) (deregister func() error, err error) {
	if r, ok := t.(Registrar); ok {
		return r.Register(p)
	}
	return func() error { return nil }, nil
}

// Abort drops t as an Aborter does, or closes it if t cannot abort: the
// way to give up on any transport.
func Abort(t Transport, cause error) error {
	if a, ok := t.(Aborter); ok {
		return a.Abort(cause)
	}
	return t.Close()
}

// Message is a received payload, still in the receive slot it landed in.
//
// It is kept to 32 bytes, hence the 32-bit rank and slot: the compiler
// keeps a value that small in registers as it passes up through the
// layers, while a bigger one goes through memory at each, copied in
// 16-byte loads of what was just stored 8 bytes at a time, a pattern the
// core cannot forward and stalls on.
type Message struct {
	// Data is the payload: a view of the slot, valid until Release.
	Data []byte
	// Peer is the sender's rank.
	Peer int32
	// Slot identifies the slot within the peer's slab (transport-private).
	Slot int32
}

var (
	// ErrPeerLost reports that a peer died, disconnected or broke the protocol.
	ErrPeerLost = errors.New("peer lost")
	// ErrClosed reports use of a transport after Close.
	ErrClosed = errors.New("transport closed")
	// ErrPeerClosed reports that a peer closed its end in an orderly way
	// while this rank still expected to talk to it. For the caller that is
	// a lost peer too, so it wraps ErrPeerLost.
	ErrPeerClosed = fmt.Errorf("peer closed the connection: %w", ErrPeerLost)
)

// PeerError says which peer an error concerns and what was being done.
// It unwraps to the cause, so errors.Is(err, ErrPeerLost) works through it.
type PeerError struct {
	Peer int    // rank of the peer
	Op   string // "send", "recv", "connect", ...
	Err  error
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("%s rank %d: %v", e.Op, e.Peer, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// Losses lists several lost peers, first noticed first. It unwraps to each,
// so errors.Is(err, ErrPeerLost) and errors.As for a *PeerError work.
type Losses []*PeerError

func (l Losses) Error() string {
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

func (l Losses) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

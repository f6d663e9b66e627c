package transport

import "time"

// LinkOptions are the options every transport takes (tcp, shm and rdma
// each embed them in their own Options, beside what only they have). The
// zero value picks the transport's defaults; its package says what they
// are and how far each may go. Every rank of a job must pass the same
// Slots, SlotSize and Namespace: each link's handshake checks.
type LinkOptions struct {
	// Slots is the number of receive slots per peer, at least 2.
	Slots int
	// SlotSize is the bytes per slot, the largest message: a multiple of
	// 64, at least 4 KiB.
	SlotSize int
	// Namespace separates meshes built through the same store (one per
	// communicator); it prefixes the store keys and is checked at each
	// link's handshake.
	Namespace string
	// HandshakeTimeout bounds the setup of one link: authentication,
	// hellos and what the transport exchanges then (default 10 s).
	HandshakeTimeout time.Duration
	// Spin is how long a waiting call busy-polls before it sleeps
	// (default 1 ms, see internal/mesh; negative: never spin).
	Spin time.Duration
	// Crowded says the ranks of this host outnumber the CPUs they may run
	// on together (not this process's share: a launcher that binds each
	// rank to a core of its own leaves every rank one CPU, and they are
	// not crowded). The peer a waiting call waits for is then likely
	// queued behind it: shm and rdma spin only 20 µs, and tcp gives its
	// CPU away (sched_yield) after each empty poll.
	Crowded bool
	// Eager makes Connect link every pair of ranks before it returns, so
	// that a job either starts fully connected or fails at start. By
	// default (false) a rank links to a peer the first time a Send or
	// Recv needs it, so that a job whose algorithms talk to O(log n)
	// partners holds O(log n) links, with their slabs or rings, per rank.
	// A communicator sets it for tcp with GOCOLL_TCP_CONNECT=eager and
	// for rdma with GOCOLL_RDMA_CONNECT=eager.
	Eager bool
}

// Package rdma is the transport over InfiniBand and RoCE through rdma-core's
// libibverbs: the one a job uses when its hosts have RDMA NICs.
//
// # Queue pairs on demand
//
// At Connect each rank opens one device port (Options.Device, else the
// first device with an active port), allocates a protection domain, one
// completion queue with a completion channel, and starts a small
// connection manager: a TCP listener on the interface through which it
// reaches the rendezvous store (as tcp's), whose address is its one
// record in the store. Nothing is made per peer yet. The first Send or
// Recv that needs a peer makes this rank's one reliable-connected queue
// pair to it (credits, probes, goodbyes and aborts go only to peers with
// one), with that peer's receive slab and send staging slab, takes it to
// INIT with its receives posted, fetches the peer's address from the
// store and exchanges queue pair numbers, PSNs, LID/GID, MTU and the
// receive slab's address and rkey with it over a short-lived connection
// authenticated with the job token, as rdma_cm would over its own channel. The answering end takes
// its queue pair to RTR and RTS before it answers, and the dialer writes
// only after its own are, so no write reaches a queue pair not yet
// receiving (such a write is dropped and counts against the retries).
// Every rank answers in the background, without a call of its user's:
// waiting for the other end to need the pair too could deadlock a rank
// whose Send goes to a peer busy receiving from a third rank, itself
// waiting on the first. When both ends dial at once, one queue pair per
// end still results (a rank makes at most one per peer, and every
// exchange with that peer carries its numbers), and the higher rank's
// connection is the one answered, as in tcp. links.go has the details.
//
// So a job's store traffic is one record per rank and one lookup per
// pair that talks, not n records of n entries each; and a rank's queue
// pairs, registered memory and completion traffic grow with the partners
// its algorithms use (O(log n) for recursive doubling, 2 for a ring), not
// with n. Its descriptors do not grow at all: the exchange's connection
// is closed once the pair is up, leaving the listener, the device's and
// the completion channel's, and an eventfd. The completion queue cannot
// grow in place, so it is sized at Connect for every peer that can ever
// connect, up to what the device allows; a device that caps it lower
// lets a rank make queue pairs to as many peers as fit, and a further
// one fails with ErrInvalid saying so. Options.Eager makes every queue
// pair at Connect instead (comm: GOCOLL_RDMA_CONNECT=eager), so that a
// job either starts fully connected or fails at start.
//
// # Data path
//
// Receive slabs and send staging slabs are mmapped off the Go heap (the
// NIC writes there behind the garbage collector's back; huge pages when
// the system has them reserved, else transparent huge pages, for slabs of
// 2 MiB and more), registered once, and cut into Options.Slots slots of
// Options.SlotSize bytes. A Send is one RDMA WRITE_WITH_IMM into the
// peer's next slot; its 32-bit immediate carries the length (25 bits,
// hence slots of at most 16 MiB) and credits going back (7 bits; see
// below). Slots fill in order,
// so which one a write filled goes without saying. Messages up to the
// inline size (256 bytes by default, as far as the device grants) are
// written inline from the caller's buffer; larger ones are copied into
// this rank's staging slot and written from there, which lets Send return
// at once without waiting for the write to complete. SendParts
// (transport.PartSender) makes the same one copy of a header and a body
// given apart, so the mux above does not first join them in a buffer of
// its own: one copy of every byte sent instead of two. The receiver learns
// of the write from the completion of one of the zero-length receives it
// keeps posted, replaced as they are consumed.
//
// Credits: a sender starts with one credit per slot and spends one per
// message. The receiver returns the credits of the slots it released in
// the immediate of its next data write to that peer, so ranks that talk
// both ways (every exchange of a collective) send no other message for
// them. Credits still owed go back in a SEND_WITH_IMM with no payload (the
// immediate holds the count) once half the slots are released, or as soon
// as the progress engine finds the completion queue empty (the rank is
// waiting then, and the peer may be waiting for exactly those credits),
// whichever is first. So per direction at most Slots data writes and
// Slots credit messages are in flight, and the receive and send queues
// are sized from that; nothing can overrun a slot still being read.
//
// Sends are signalled selectively: a staged write is always signalled
// (its staging slot may be reused only after it completes); inline writes
// and credits only every quarter of the send queue, which is what keeps
// the queue accounted for.
//
// # Zero-copy sends
//
// Register (transport.Registrar; comm.Register for programs) registers a
// caller's buffer with the device's protection domain, which every queue
// pair shares, those made later too, as NCCL's ncclCommRegister does. A
// message whose body lies inside a registered buffer and is at least
// Options.ZeroCopyMin long (64 KiB by default) is then one write of two
// gather elements: the header, if any, copied to the staging slot, and
// the body read by the device straight from the caller's memory. Such a
// send returns only once its write has completed, since the body is the
// caller's again on return; below the minimum, the copy costs less than
// that wait. The buffer is pinned (runtime.Pinner) while registered, so
// the garbage collector neither moves nor frees it; deregistering waits
// for sends reading from it. Registration is explicit, not a cache the
// transport keeps behind the caller's back: a cached registration of
// memory the program has since freed or unmapped would leave the device
// reading pages that no longer back those addresses. On Soft-RoCE in the
// VM, zero-copy and the staging path measure the same within the noise
// (the device's own software copies dominate); what it saves, a copy of
// every byte sent, has not been measured on a real NIC.
//
// # Progress
//
// There are no background goroutines. Whichever Send or Recv is waiting
// becomes the progress engine and polls the completion queue in batches
// of 32, handing slots, credits and failures to whoever waits for them.
// It busy-polls for Options.Spin (short when ranks outnumber cores: see
// Options.Crowded), then arms the completion channel and sleeps in poll(2) on it,
// 20 ms at a time, so that 8 ranks on 2 cores still finish.
//
// # Failures
//
// A failed work completion puts the queue pair in error: the peer is
// lost, and the error (a *WCError wrapping transport.ErrPeerLost) names the
// ibv_wc_status, e.g. IBV_WC_RETRY_EXC_ERR when the peer acknowledged
// nothing through every retry (dead or unreachable). A rank that only
// receives from a dead peer would never post a request to it, so a waiting
// engine sends every silent peer an empty RDMA write once per
// Options.ProbeInterval; a dead peer is then noticed within about
// ProbeInterval + (RetryCount+1) × 4.096 µs × 2^Timeout (1.5 s by default).
// A peer this rank has no queue pair with is lost when a call needs it
// and the exchange fails: its connection manager refuses the connection
// (it died, gave up or closed), or the store fails the lookup of its
// address; the error wraps ErrPeerLost and names it. A rank that needs
// no call to such a peer learns of its death from the store, which sees
// every rank's departure (comm watches it). Close sends each peer with a
// queue pair a goodbye (ErrPeerClosed on its side) and waits for theirs;
// Abort sends an abort (ErrPeerLost on theirs) and waits for nothing. The abort's cause travels with it, written into the slot the
// peer reads next when one is free, so the peer's error says why this rank
// gave up.
//
// Queue pair timeouts are documented on Options: Timeout (default 14:
// 67 ms), RetryCount (default 6, not 7, which Soft-RoCE takes as
// "forever"), RNRRetry (default 7: forever, since the credit protocol
// keeps receives posted).
//
// # Binding and build
//
// cgo is used in this package only. libibverbs.so.1 is opened at run
// time with dlopen, and the few structures the package touches are
// declared in ibv_abi.h (TestABI checks them against the real
// <infiniband/verbs.h> when libibverbs-dev is installed), so a program
// builds with plain `go build` on a machine without rdma-core and runs
// everywhere, using RDMA where the library and a device are present. The
// data-path verbs (ibv_post_send, ibv_post_recv, ibv_poll_cq,
// ibv_req_notify_cq) are inline functions in the header that call through
// the context's ops table; this package calls through the same table.
// With CGO_ENABLED=0 Connect returns ErrNoCgo.
//
// Errors that mean "no RDMA here" wrap ErrUnavailable: the library is
// missing (ErrNoLibrary), no device (ErrNoDevice), the named device does
// not exist (ErrDeviceNotFound, listing those that do), no active port
// (ErrPortNotActive), an empty GID (ErrBadGID), or RLIMIT_MEMLOCK below
// what the slabs need (ErrMemlock, saying the limit and how to raise it;
// Connect checks room for one peer's slabs, or every peer's when eager,
// and each new queue pair for its own).
// Probe checks the first four without building anything.
//
// # Fork safety
//
// Registered memory is pinned, and a fork would make its pages
// copy-on-write, leaving the NIC and the parent on different pages. The
// slabs are mapped MADV_DONTFORK, so a child simply does not have them; Go's
// os/exec starts children with a vfork-like clone that shares the address
// space until exec, which is safe. A program that forks by other means
// (syscall.RawSyscall(SYS_FORK), C code) and touches memory after the fork
// should set RDMAV_FORK_SAFE=1 in the environment before the first
// Connect (or call ibv_fork_init from C), which makes libibverbs mark
// every registration DONTFORK; Linux 5.13 and later also copy pinned pages
// at fork.
package rdma

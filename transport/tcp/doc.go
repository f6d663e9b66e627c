// Package tcp is the transport over TCP sockets, for ranks on different
// hosts without RDMA, and the reference every other transport is tested
// against.
//
// Every rank can reach every other over a connection of its own, but a
// link is made only when a call first needs it: at Connect a rank listens
// on one port and publishes it through the rendezvous store; the first
// Send or Recv to a peer fetches that peer's address and dials it, and an
// accept loop admits the peers that dial this rank, for as long as the
// transport is open. A job whose algorithms talk to O(log n) partners
// (recursive doubling, trees, a ring) thus holds O(log n) connections,
// descriptors and receive slabs per rank instead of n-1, and starts
// without the n(n-1)/2 handshakes of an all-to-all mesh. Either end may
// dial first; when both do at once the higher rank's connection wins
// (links.go says how). A peer that cannot be reached is lost like one
// whose connection broke. Options.Eager builds every link at Connect
// instead, so that a job either starts fully connected or fails at start;
// Options.Warm builds a chosen few. Each connection is authenticated with
// the job token (see internal/auth) and then carries frames in both
// directions: a 12-byte header (kind, slot, length, piggybacked credits)
// and the payload.
//
// Encryption in transit is opt-in: Options.Encrypt, or GOCOLL_ENCRYPT=1
// for a communicator (comm reads it with the other settings; 0 or unset
// leaves it off). Every frame, credits and goodbyes included, is then
// sealed with AES-256-GCM (AES-NI where the CPU has it) under keys
// derived by HKDF-SHA256 from the session key of the connection's
// authentication by the job token, GRUN_TOKEN (forward-secret, see
// internal/auth), salted with both ends' hellos:
// each connection and each direction has a key of its own, and the nonce
// is the count of frames sent, which the receiver counts too. A frame
// altered, replayed, dropped or reordered in transit loses its sender:
// the error wraps ErrPeerLost and ErrFrameAuth and names the rank. The
// frame header (kind, slot, length, credits) travels in the clear, bound
// to its frame as additional data. Encryption without a token fails
// Connect (ErrNoToken, naming GRUN_TOKEN), and a rank that encrypts
// refuses a link to one that does not, and vice versa, at the handshake
// (ErrEncryptMismatch), so every rank must set the same. Shared memory
// (transport/shm) stays plaintext, being on one host under one uid; a
// job over shared memory and TCP seals its TCP links. See
// docs/security-encryption.md for what it costs.
//
// Data moves only inside Send, Recv and Close, as in MPI (the background
// goroutines only accept and dial links): whichever call is waiting
// becomes the progress engine, drains every linked peer's socket
// (non-blocking reads on raw descriptors) and lands each payload straight
// in the slot of that peer's receive slab, allocated with the link,
// spinning briefly on poll(2) before it blocks in it. Where the process
// has a single P (GOMAXPROCS=1, as a rank bound to one CPU has), the
// spinning call gives the Go scheduler a turn every 128 polls, as shm's
// does (mesh.TurnEvery), so that the rank's other goroutines run while
// it waits. Draining
// every peer, not just the one waited for, is what keeps two ranks writing
// large frames to each other from deadlocking: inbound data always has a
// slot, because a sender only sends with a credit. Sends go to the kernel
// with writev straight from the caller's buffer, the mux's header and the
// payload as two parts of one frame (transport.PartSender). Credits, the receiver's
// promise that a slot is free again, ride back on data frames going the
// other way, or in a frame of their own once half the slots wait to be
// reported. Compared with a reader goroutine per peer, this saves two
// goroutine hand-offs per message, which is most of a small message's
// latency.
//
// The engine is written for Linux and runs on the other Unix systems
// (macOS, the BSDs) with portable stand-ins for Linux's calls: a pipe
// instead of an eventfd to wake a blocking poll, x/sys/unix's read, write
// (one per buffer: there is no writev wrapper) and poll instead of raw
// system calls, runtime.Gosched instead of sched_yield, and the keepalive
// options each system has. Without TCP_USER_TIMEOUT, SilentPeer bounds
// the silence of an idle link only, except on macOS, which bounds
// retransmission with TCP_RXT_CONNDROPTIME instead. On Windows there is
// no engine: Connect builds a job of one rank and fails for more with an
// error wrapping ErrUnsupported.
package tcp

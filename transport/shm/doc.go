// Package shm is the transport over shared memory, for ranks on one host.
//
// Every ordered pair of linked ranks (s, r) shares one ring: a memfd that
// the receiver r creates, seals at its size and passes to s over a Unix
// socket (SCM_RIGHTS), and that both map. Nothing is ever named in the
// file system, so a rank that crashes, at any moment, leaves no segment
// behind in /dev/shm: the memory goes when the last process mapping it
// exits.
//
// Pairs are linked on demand. Connect only listens on an abstract Unix
// socket and publishes its name in the store; the first Send or Recv that
// needs peer r reads r's name, dials, and the two ends swap rings. Either
// end may dial first (waiting for the other could deadlock a rank whose
// Send goes to a peer busy receiving from a third rank); when both dial
// at once the higher rank's connection wins, decided before any ring is
// made (internal/mesh.Links has the rules). So a rank maps rings, 2 x
// Slots x SlotSize bytes per peer, and holds a socket only for the
// partners its algorithms use: O(log n) for a job that runs allreduce.
// A peer that died before any contact refuses the dial: the call fails
// with ErrPeerLost naming it, and Lost fires. Options.Eager links every
// pair at Connect instead, as the transport did before (no environment
// variable sets it: GOCOLL_TCP_CONNECT is TCP's, and a shared-memory link
// costs a Unix-socket handshake, not a round trip across a network).
//
// A ring is the slab of the transport contract: Slots slots of SlotSize
// bytes, each behind a small header with its sequence number, plus a head
// counter (messages released, written only by the receiver) on a cache line
// of its own. The sender holds a credit while sent-head < Slots (it rereads
// head only when the credits it last saw run out); it copies the payload
// into slot sent%Slots and publishes it by storing the slot's sequence
// number; the receiver polls that word, hands out a view of the slot, and
// advances head on Release. Messages of up to 504 bytes start right after
// the 32-bit sequence number and length, so the cache line the receiver
// polls carries the first 56 bytes of them (all of a small one), and the
// rest follows in as few lines as it fills. A larger message sent in two
// parts (SendParts: the mux's and the call's headers, then the payload)
// is placed so that its second part starts on the 128-byte boundary
// behind the slot header: the receiver reduces or copies out of it, and
// the sender copies into it, at 64-byte-aligned addresses, which the
// vector kernels need for full speed. Single producer, single consumer,
// no locks and no system calls while both sides are busy. A body of 4
// KiB or more is written with ordinary or non-temporal stores, whichever
// the ring's receiver measures to be cheaper (nontemporal.go).
//
// A waiting call spins on its word for Options.Spin and then parks in a
// futex on the word (on head, its low 32 bits), after raising a flag that
// tells the other side to issue a FUTEX_WAKE when it changes the word. So a
// host with more ranks than cores (8 on 2) does not burn its cores, while
// two ranks that each own a core pay no system call per message. After
// its first polls a spinning call gives the CPU's spin-wait hint between
// polls (PAUSE, YIELD: see relax): the core's other hardware thread, or a
// hypervisor running the virtual CPU the call waits for on the same
// physical one, gets the cycles a bare loop would burn. Where the process
// has a single P (GOMAXPROCS=1, as a rank bound to one CPU has), the
// spinning call gives the Go scheduler a turn every 128 polls, so that
// the rank's other goroutines run while it waits.
//
// The Unix socket of each linked pair stays open for the life of the
// transport, carrying nothing but a goodbye byte at Close (or an abort
// notice); peers never linked hear of neither, and learn that this rank
// left as any rank does, through the store (comm's departure watch) or a
// refused dial. A goroutine per linked peer reads it: when the peer
// process dies, the kernel closes its end and the read returns, so the
// loss is noticed within microseconds whatever the waiting calls are
// doing; the reader then wakes every futex involving that peer.
// Goodbye then end of stream is an orderly close (ErrPeerClosed), end of
// stream alone is a lost peer (ErrPeerLost), which is also how Abort
// looks from the other side.
//
// Every message goes through the ring, however large: the transport has
// no rendezvous in which the receiver copies a large message straight
// out of the sender's memory (process_vm_readv), as Open MPI's vader
// does. That would make the receiver's one copy the kernel's, which took
// as long as the ring's two at 256 KiB and 1.5 to 2.5 times as long from
// 1 MiB (internal/cma's BenchmarkHop), save nothing on a message that is
// reduced (it must land before it is reduced), and hold Send until the
// receiver's pull, which the algorithms' send-then-receive steps cannot
// wait for (bench/results/cma-transport.txt). A large allreduce of
// buffers the ranks allocated (comm.Alloc), or on 2 ranks registered
// (comm.Register), takes a single copy a whole call at a time instead,
// outside the rings.
//
// Window (window_linux.go) is memory for comm.Alloc, which the ranks of
// a host read in place rather than through rings: a sealed memfd like a
// ring, but opened by each peer through the creator's descriptor table
// (/proc/<pid>/fd/<fd>, as the kernel allows a process that may read
// the creator's memory) rather than passed over a socket, since it is
// made for a communicator's ranks, collectively, not for one linked
// pair. Its name carries a random tag the peer checks, with its size and
// seals, before mapping it; the creator closes its descriptor once every
// peer has mapped it, and nothing is named in the file system.
//
// All of this is Linux's (memfd seals, abstract Unix sockets, futexes).
// On other systems the package compiles, so that programs importing gocoll
// build anywhere, but Connect and Probe fail with an error wrapping
// ErrUnsupported ("... needs Linux (memfd, futex); this is darwin"), and
// comm's "auto" transport uses the network instead.
package shm

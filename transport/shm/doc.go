// Package shm is the transport over shared memory, for ranks on one host.
//
// Every ordered pair of ranks (s, r) shares one ring: a memfd that the
// receiver r creates, seals at its size and passes to s over a Unix socket
// (SCM_RIGHTS), and that both map. Nothing is ever named in the file
// system, so a rank that crashes, at any moment, leaves no segment behind
// in /dev/shm: the memory goes when the last process mapping it exits.
//
// A ring is the slab of the transport contract: Slots slots of SlotSize
// bytes, each behind a small header with its sequence number, plus a head
// counter (messages released, written only by the receiver) on a cache line
// of its own. The sender holds a credit while sent-head < Slots (it rereads
// head only when the credits it last saw run out); it copies the payload
// into slot sent%Slots and publishes it by storing the slot's sequence
// number; the receiver polls that word, hands out a view of the slot, and
// advances head on Release. Messages of up to 56 bytes sit right after the
// 32-bit sequence number and length, so the cache line the receiver polls
// carries them. Single producer, single consumer, no locks and no system
// calls while both sides are busy.
//
// A waiting call spins on its word for Options.Spin and then parks in a
// futex on the word (on head, its low 32 bits), after raising a flag that
// tells the other side to issue a FUTEX_WAKE when it changes the word. So a
// host with more ranks than cores (8 on 2) does not burn its cores, while
// two ranks that each own a core pay no system call per message.
//
// The Unix socket of each pair stays open for the life of the transport,
// carrying nothing but a goodbye byte at Close. A goroutine per peer reads
// it: when the peer process dies, the kernel closes its end and the read
// returns, so the loss is noticed within microseconds whatever the waiting
// calls are doing; the reader then wakes every futex involving that peer.
// Goodbye then end of stream is an orderly close (ErrPeerClosed), end of
// stream alone is a lost peer (ErrPeerLost), which is also how Abort
// looks from the other side.
//
// All of this is Linux's (memfd seals, abstract Unix sockets, futexes).
// On other systems the package compiles, so that programs importing gocoll
// build anywhere, but Connect and Probe fail with an error wrapping
// ErrUnsupported ("... needs Linux (memfd, futex); this is darwin"), and
// comm's "auto" transport uses the network instead.
package shm

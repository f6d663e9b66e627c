package shm

import (
	"errors"
	"time"

	"github.com/gocoll/gocoll/internal/mesh"
)

// Options tune the mesh. The zero value picks the defaults.
type Options struct {
	// Slots is the number of slots per ring (default 8, at least 2).
	Slots int
	// SlotSize is the bytes per slot, the largest message (default 256 KiB,
	// a multiple of 64).
	SlotSize int
	// Namespace separates meshes built through the same store (one per
	// communicator); it prefixes the store keys and is checked at connect.
	Namespace string
	// HandshakeTimeout bounds a single connection's setup.
	HandshakeTimeout time.Duration
	// Spin is how long a waiting call polls its ring before it parks in a
	// futex (default DefaultSpin, or 20 µs when Crowded; negative: never
	// spin).
	Spin time.Duration
	// Crowded says the ranks of this host outnumber the CPUs they may run
	// on together (see tcp.Options.Crowded): a waiting call then spins
	// briefly and gives its CPU away (sched_yield) every few polls, since
	// the peer it waits for is likely queued behind it. Four ranks on two
	// cores, 8-byte allreduce: 22-46 us yielding every 256 polls, 7-15 us
	// every 4.
	Crowded bool
	// Eager makes Connect link every pair of ranks before it returns: a
	// pair of rings (2 x Slots x SlotSize bytes of shared memory) and a
	// socket for every peer, as the transport did before links were made
	// on demand. By default (false) a rank links to a peer the first time
	// a Send or Recv needs it, so that a job whose algorithms talk to
	// O(log n) partners holds O(log n) rings and descriptors per rank.
	// Tests and benchmarks use it to compare; comm leaves it off.
	Eager bool
	// JobRanks is the job rank of each rank of this mesh, when it joins
	// only one host's ranks of a larger job (see NewHybrid): the texts a
	// peer's goodbye reaches others in name it by its job rank, as every
	// rank in a communicator's errors is named. Nil: the mesh is the job.
	JobRanks []int
}

const (
	DefaultSlots    = 8
	DefaultSlotSize = 256 << 10
	MaxSlotSize     = 64 << 20
	maxSlots        = 1 << 12

	// DefaultSpin is the polling budget of a rank that has a core to
	// itself; see mesh.DefaultSpin for why it is this long.
	DefaultSpin = mesh.DefaultSpin

	// parkSlice bounds one futex wait, so that a wake lost to a bug, or a
	// peer that died in a way the socket does not show, costs latency and
	// not a hang.
	parkSlice = 50 * time.Millisecond
)

var rings = mesh.Rings{Slots: DefaultSlots, MaxSlots: maxSlots, SlotSize: DefaultSlotSize, MaxSlotSize: MaxSlotSize}

var errProtocol = errors.New("protocol violation")

func (o *Options) fill() error {
	if err := rings.Fill("shm", &o.Slots, &o.SlotSize); err != nil {
		return err
	}
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = mesh.DefaultHandshake
	}
	o.Spin = mesh.Spin(o.Spin, o.Crowded)
	return nil
}

// ErrUnsupported is wrapped by the error of Connect, and of Probe, on a
// system the shared-memory transport does not run on: it needs Linux
// (sealed memfds passed over Unix sockets, futexes). A caller choosing a
// transport falls back to the network on it.
var ErrUnsupported = errors.New("shm: shared-memory transport not supported on this system")

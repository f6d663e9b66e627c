package shm

import (
	"errors"
	"fmt"
	"time"

	"github.com/gocoll/gocoll/internal/mesh"
	"github.com/gocoll/gocoll/transport"
)

// Options tune the mesh. The zero value picks the defaults: rings of 8
// slots of 256 KiB (and transport.Headroom) (at most 4096 slots of 64 MiB), links made on demand
// (Eager: a pair of rings, 2 x Slots x SlotSize bytes of shared memory,
// and a socket for every peer at Connect). A waiting call polls its ring
// for Spin, then parks in a futex; a crowded one also gives its CPU away
// (sched_yield) every few polls. A long message goes into the peer's
// slot with the stores NonTemporal says.
type Options struct {
	transport.LinkOptions
	// NonTemporal says how a body of 4 KiB or more is written into a
	// peer's slot (see nontemporal.go): by default, with ordinary or
	// non-temporal stores, whichever each ring measures to cost less.
	NonTemporal NonTemporal
	// JobRanks is the job rank of each rank of this mesh, when it joins
	// only one host's ranks of a larger job (see NewHybrid): the texts a
	// peer's goodbye reaches others in name it by its job rank, as every
	// rank in a communicator's errors is named. Nil: the mesh is the job.
	JobRanks []int
}

const (
	DefaultSlots    = 8
	DefaultSlotSize = 256<<10 + transport.Headroom
	MaxSlotSize     = 64 << 20

	// parkSlice bounds one futex wait, so that a wake lost to a bug, or a
	// peer that died in a way the socket does not show, costs latency and
	// not a hang.
	parkSlice = 50 * time.Millisecond
)

var errProtocol = mesh.ErrProtocol

func (o *Options) fill() error {
	if o.NonTemporal < NonTemporalAuto || o.NonTemporal > NonTemporalOn {
		return fmt.Errorf("shm: non-temporal stores %d: want NonTemporalAuto, NonTemporalOff or NonTemporalOn", o.NonTemporal)
	}
	rings := mesh.Rings{Slots: DefaultSlots, MaxSlots: 1 << 12, SlotSize: DefaultSlotSize, MaxSlotSize: MaxSlotSize}
	return rings.Fill("shm", &o.LinkOptions, true)
}

// ErrUnsupported is wrapped by the error of Connect, and of Probe, on a
// system the shared-memory transport does not run on: it needs Linux
// (sealed memfds passed over Unix sockets, futexes). A caller choosing a
// transport falls back to the network on it.
var ErrUnsupported = errors.New("shm: shared-memory transport not supported on this system")

package mesh

import (
	"fmt"
	"runtime"
	"time"

	"github.com/gocoll/gocoll/transport"
)

// The transports share one wait policy: poll for a while, then sleep.
const (
	// DefaultSpin is the busy-poll budget of a rank that has a core to
	// itself. It must outlast the time a reply takes when the peer polls
	// too (a few µs) and, more to the point, the scheduler's wake-up
	// latency: with a shorter spin (tens of µs on a VM), two ranks in a
	// ping-pong settle into both sleeping every round, and an 8-byte
	// allreduce measured ~70 µs instead of ~8 µs. MPI and NCCL spin
	// without limit; the limit keeps an idle job from burning its cores.
	DefaultSpin = time.Millisecond
	// CrowdedSpin is the budget when a host's ranks outnumber its cores:
	// a spinning rank then takes the core from the very peer it waits for.
	// (tcp keeps the full budget: it yields the CPU after every poll.)
	CrowdedSpin = 20 * time.Microsecond
)

// Spin resolves a transport's Spin option: zero picks the default for a
// rank with a core to itself or a crowded one, a negative value means no
// spinning at all.
func Spin(spin time.Duration, crowded bool) time.Duration {
	switch {
	case spin < 0:
		return 0
	case spin > 0:
		return spin
	case crowded:
		return CrowdedSpin
	}
	return DefaultSpin
}

// SolePolls is how many polls a busy wait makes between turns it gives
// the Go scheduler when this process has a single P (GOMAXPROCS=1, as a
// rank bound to one CPU gets). A spinning wait holds that P: every other
// goroutine of the rank (a pipelined algorithm's other stage, a mux's
// reader, the watchdog, the rendezvous watcher, a program's own) runs
// only when the wait gives it a turn, or when the runtime preempts the
// wait, 10 ms on. A turn with nothing else to run costs about 0.1 µs,
// a few percent of 128 polls of shared memory and less of TCP's (a
// system call each), and delays seeing a message by no more than that.
const SolePolls = 128

// TurnEvery is how many polls a busy wait makes between turns it gives
// the Go scheduler (runtime.Gosched): every, the transport's own period
// (0 for none), or SolePolls where this process has a single P and every
// is longer. It reads GOMAXPROCS, which takes the scheduler's lock, so a
// wait asks once, after its first polls found nothing.
func TurnEvery(every int) int {
	if runtime.GOMAXPROCS(0) == 1 && (every <= 0 || every > SolePolls) {
		return SolePolls
	}
	return every
}

// LongWaitSpin is a wait's busy-poll budget while the waits before it
// lasted longer than the full budget (see Waits).
const LongWaitSpin = 20 * time.Microsecond

// Waits chooses each wait's busy-poll budget from how long the waits
// before it lasted. While they have lately run longer than the full
// budget, the bytes come at a link's pace (a shaped or distant link, a
// peer far behind), and a rank that busy-polls through them takes from
// the CPU the kernel needs to move them: it then spins only LongWaitSpin,
// enough for a wait about to end. Short waits (a ping-pong of small
// messages, a fast link) keep the full budget. The zero value is ready;
// it is not safe for concurrent use (a transport's progress holder owns
// it).
type Waits struct {
	avg time.Duration // running mean of the last waits, each weighing 1/4
}

// Spin is the budget of the next wait, given the full one.
func (w *Waits) Spin(full time.Duration) time.Duration {
	if w.avg > full {
		return min(full, LongWaitSpin)
	}
	return full
}

// Done records how long a wait lasted, to its end.
func (w *Waits) Done(d time.Duration) { w.avg += (d - w.avg) / 4 }

// Rings bounds and defaults a transport's slot geometry: the slot count
// and size a zero value gets, and the largest each may be.
type Rings struct {
	Slots, MaxSlots       int
	SlotSize, MaxSlotSize int
}

// minSlotSize keeps a slot big enough for any control payload (abort
// texts, headers) a transport writes into one.
const minSlotSize = 4 << 10

// Fill gives o's zero fields the defaults (r's slot geometry,
// DefaultHandshake, the spin of Spin, shortened for a crowded rank if
// crowdedSpin) and checks the slots; what names the transport in the
// error ("tcp", "shm").
func (r Rings) Fill(what string, o *transport.LinkOptions, crowdedSpin bool) error {
	if o.Slots == 0 {
		o.Slots = r.Slots
	}
	if o.SlotSize == 0 {
		o.SlotSize = r.SlotSize
	}
	if o.Slots < 2 || o.Slots > r.MaxSlots {
		return fmt.Errorf("%s: %d slots per peer, want 2..%d", what, o.Slots, r.MaxSlots)
	}
	if o.SlotSize < minSlotSize || o.SlotSize > r.MaxSlotSize || o.SlotSize%64 != 0 {
		return fmt.Errorf("%s: slot size %d, want a multiple of 64 in [4 KiB, %d MiB]", what, o.SlotSize, r.MaxSlotSize>>20)
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshake
	}
	o.Spin = Spin(o.Spin, crowdedSpin && o.Crowded)
	return nil
}

// DefaultHandshake bounds one connection's setup when the caller does not.
const DefaultHandshake = 10 * time.Second

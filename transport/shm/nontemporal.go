package shm

import (
	"slices"
	"sync/atomic"
	"time"
)

// A long message written into a peer's slot with ordinary stores first
// takes each of the slot's cache lines from the receiver, which read it a
// lap of the ring earlier, and the receiver's read then takes it back:
// two transfers between the cores per line. Non-temporal stores write
// whole lines towards memory without reading them first, and the
// receiver reads each line from there. Which is cheaper depends on where
// the two cores sit: where they share a cache, a line moves between them
// faster than from memory, and ordinary stores were 1.8x faster; where
// they do not (different core complexes, sockets, or the vCPUs of a VM
// placed apart by its host), non-temporal stores were 2-3x faster (both
// on one VM whose host moved its vCPUs: docs/performance.md,
// "Non-temporal stores into the rings").
//
// So by default (NonTemporalAuto) each ring measures. Its receiver
// judges: of a sample of the long messages, it adds the time the sender
// took to copy one in (which the sender writes in the slot header) to the
// time from handing it out to its release (the reduction or copy that
// reads it), per byte, and keeps the median of the last few of each way
// of writing. It asks for the cheaper in a word of the ring's header,
// which the sender reads before each long message; the sender times one
// long message in timeEvery written the way asked, and now and then
// writes a burst the other way, so that a change of placement shows.
// Neither side times a message that reaches further into its slot than
// any before it: its pages are still being faulted in, which in a first
// trial made the first samples 200 times the later ones. Short messages,
// whose latency is the point, keep ordinary stores, and the caller's
// buffers are never written so. On amd64 only, with SSE2's MOVNTDQ,
// which every amd64 CPU has; elsewhere the copy is ordinary whatever is
// asked.

// NonTemporal says how a message body of nonTemporalMin bytes or more is
// written into a peer's slot.
type NonTemporal int

const (
	// NonTemporalAuto has each ring measure which way its messages
	// cost less, from the sender's copy to the receiver's release.
	NonTemporalAuto NonTemporal = iota
	// NonTemporalOff writes every message with ordinary stores.
	NonTemporalOff
	// NonTemporalOn writes long bodies with non-temporal stores.
	NonTemporalOn
)

func (m NonTemporal) String() string {
	switch m {
	case NonTemporalAuto:
		return "auto"
	case NonTemporalOff:
		return "off"
	case NonTemporalOn:
		return "on"
	}
	return "NonTemporal(?)"
}

// Here is the way m means on this build: NonTemporalOff where the
// transport has no non-temporal stores of its own (not amd64, or the
// purego tag), whatever was asked, so that nothing is timed for a
// choice between two equal copies.
func (m NonTemporal) Here() NonTemporal {
	if !haveNonTemporal {
		return NonTemporalOff
	}
	return m
}

// nonTemporalMin is the shortest body written with non-temporal stores:
// below it a message is latency, not bandwidth.
const nonTemporalMin = 4 << 10

// Of the long bodies sent to a peer, one in timeEvery is timed. The other
// way is tried in bursts: a message written one way into lines the other
// way left (in the reader's cache, or in memory) costs what neither way
// costs once it runs, so a burst writes a lap of the ring (every slot)
// first and times the burstTimed messages after it. The first two
// bursts, ordinary then non-temporal, measure both ways; later ones come
// every exploreEvery long messages, costing about (slots+burstTimed) /
// exploreEvery of them the dearer way. The receiver judges from the
// median of the last judgeSamples of each way, once it has judgeFirst of
// both. It asks for non-temporal stores only when they cost under
// toNonTemporal of the ordinary ones, and back when ordinary ones cost
// under toOrdinary of them: between two near costs noise must not make it
// flap, and in doubt the ordinary stores stay, which leave the lines in a
// cache. (Where the cores shared none, non-temporal stores cost 0.35-0.6
// of the ordinary ones; where they did, 1.3-1.8 times; with 4 ranks
// sharing 2 cores the timings spread enough that a 10% margin let
// some rings choose non-temporal stores, 0.89x the ordinary speed at
// 32 MiB.)
const (
	timeEvery     = 8
	exploreEvery  = 1024
	burstTimed    = 3
	judgeSamples  = 5
	judgeFirst    = 3
	toNonTemporal = 0.75
	toOrdinary    = 0.95
)

// The mark a sender writes in the slot header of a message of more than
// inlineMax bytes.
const (
	markNonTemporal = 1 << 0 // written with non-temporal stores
	markTimed       = 1 << 1 // the sender timed its copy: copyNS holds it
)

// storeSender is how a sender writes the long bodies for one peer, owned
// by the goroutine sending to it.
type storeSender struct {
	mode   NonTemporal
	since  int      // long bodies sent since the last burst began
	bursts int      // bursts begun
	left   int      // messages left in the current burst
	burst  bool     // the current burst's way: non-temporal
	timed  [2]int   // sent timed, ordinary [0] and non-temporal [1]
	reach  []uint32 // per slot, the longest message written into it
}

// plan says how to write the next long body, an n-byte message into
// slot i of slots, whose receiver asks for non-temporal stores if asked,
// and whether to time it.
func (s *storeSender) plan(asked bool, i, slots uint64, n int) (nt, timed bool) {
	switch s.mode {
	case NonTemporalOff:
		return false, false
	case NonTemporalOn:
		return true, false
	}
	if s.reach == nil {
		s.reach = make([]uint32, slots)
	}
	fresh := uint32(n) > s.reach[i]
	if fresh {
		s.reach[i] = uint32(n)
	}
	s.since++
	if s.left == 0 && (s.bursts < 2 || s.since >= exploreEvery) {
		// The first bursts try ordinary, then non-temporal stores;
		// later ones the way not asked for.
		s.burst = !asked
		if s.bursts < 2 {
			s.burst = s.bursts == 1
		}
		s.left, s.since = int(slots)+burstTimed, 0
		s.bursts++
	}
	nt, timed = asked, s.since%timeEvery == 0
	if s.left > 0 {
		nt, timed = s.burst, s.left <= burstTimed
		s.left--
	}
	if fresh || !timed {
		return nt, false
	}
	if nt {
		s.timed[1]++
	} else {
		s.timed[0]++
	}
	return nt, true
}

// storeJudge is a receiver's judgement of the ways its sender writes
// long bodies. Recv arms it with a timed message and the Release of that
// message finishes it. They may run on different goroutines, and other
// messages' Releases beside them: armed hands the message's fields over,
// and only the goroutine releasing the armed slot reads them and disarms.
type storeJudge struct {
	armed  atomic.Bool
	slot   atomic.Int32
	nt     bool
	n      int
	sendNS uint32
	start  time.Time

	samples [2][judgeSamples]float64 // ns per byte, the latest last
	count   [2]int
	asks    bool // non-temporal asked for
}

// arm starts timing the message in slot, which the sender marked timed
// (Recv looks), unless a message being timed is still out.
func (j *storeJudge) arm(slot int32, mark, sendNS uint32, n int) {
	if j.armed.Load() {
		return
	}
	j.slot.Store(slot)
	j.nt, j.n, j.sendNS = mark&markNonTemporal != 0, n, sendNS
	j.start = time.Now()
	j.armed.Store(true)
}

// released finishes timing if slot's message is the one armed, and says
// whether the stores to ask for changed, and to which.
func (j *storeJudge) released(slot int32) (changed, nt bool) {
	if !j.armed.Load() || j.slot.Load() != slot {
		return false, false
	}
	d := time.Since(j.start) + time.Duration(j.sendNS)
	was := j.asks
	j.record(j.nt, float64(d)/float64(max(j.n, 1)))
	j.armed.Store(false)
	return j.asks != was, j.asks
}

// record takes one message's cost, written non-temporally or not, and
// judges.
func (j *storeJudge) record(nt bool, cost float64) {
	i := 0
	if nt {
		i = 1
	}
	copy(j.samples[i][:], j.samples[i][1:])
	j.samples[i][judgeSamples-1] = cost
	j.count[i]++
	if j.count[0] < judgeFirst || j.count[1] < judgeFirst {
		return
	}
	ordinary, nonTemporal := j.median(0), j.median(1)
	if j.asks {
		j.asks = !(ordinary < nonTemporal*toOrdinary)
	} else {
		j.asks = nonTemporal < ordinary*toNonTemporal
	}
}

// median is the median of the samples of way i taken so far (of the
// latest judgeSamples): a copy cut by preemption, or one that faulted a
// page in, does not move it.
func (j *storeJudge) median(i int) float64 {
	k := min(j.count[i], judgeSamples)
	var v [judgeSamples]float64
	copy(v[:], j.samples[i][judgeSamples-k:])
	slices.Sort(v[:k])
	return v[k/2]
}

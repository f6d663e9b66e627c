package collectives

import (
	"encoding/binary"
	"sort"
	"sync/atomic"
	"time"

	"github.com/gocoll/gocoll/internal/reduce"
)

// DefaultRecorded is how many of its last calls a group's flight recorder
// keeps unless Options.Recorded says otherwise.
const DefaultRecorded = 256

// recentCalls is how many of its last calls Recent gives: ranks that
// finished a call a rank is stuck in have moved on by a few calls at most
// before they need it again.
const recentCalls = 8

// recorder is a group's flight recorder: the headers of its last calls,
// call k in slot k&mask, written by the call's goroutine and read from any
// other (the watchdog, a stall report, a trace writer). Each slot is a
// seqlock: its sequence word is cleared first and set last, and a reader
// takes the rest only if it read the same sequence before and after.
// Beginning a call costs four atomic stores; a Timed recorder also reads
// the clock at the start and end of each call.
type recorder struct {
	slots []recSlot
	mask  uint64
	// hint is a call number readers have seen in the ring, from which
	// latest looks for the newest (readers write it; the calls never do).
	hint  atomic.Uint64
	timed bool
	base  time.Time // Timed: slot times are offsets from it
	// The calls of each kind and the bytes of their buffers, for
	// Counts: counted in own by the calls' goroutine in plain memory, and
	// published, once a lap of the ring, in pub up to call pubSeq (itself
	// a seqlock word); Counts adds the calls in the ring after it. An
	// atomic add per call would cost more than the rest of the
	// bookkeeping of a small call.
	own    [kindLimit]struct{ calls, bytes uint64 }
	pub    [kindLimit]struct{ calls, bytes atomic.Uint64 }
	pubSeq atomic.Uint64
	pubGen atomic.Uint64 // odd while a publication is being written
}

// recSlot holds one call: the header as it travels (words 0-3, word 1 the
// sequence number), and when Timed its start and end (nanoseconds after
// base; 0 while running) and outcome.
type recSlot [7]atomic.Uint64

// Outcomes of a call, in a Timed slot.
const (
	callRunning = 0
	callDone    = 1
	callFailed  = 2
)

func newRecorder(n int, timed bool) recorder {
	if n <= 0 {
		n = DefaultRecorded
	}
	size := 1
	for size < max(n, recentCalls) {
		size <<= 1
	}
	return recorder{slots: make([]recSlot, size), mask: uint64(size - 1), timed: timed, base: time.Now()}
}

// record writes h, the call beginning, into its slot. A program that
// repeats a few calls finds the slot holding what it would write, but for
// the call number: then only that word is stored, as a reader who sees
// the old number with these words has the old call right. An atomic store
// is a fenced instruction on amd64, and five of them were more than a
// third of the layers' work in a small call.
func (g *Group) record(h header) {
	w0, w1, w2, w3 := h.words()
	slot := &g.rec.slots[h.seq&g.rec.mask]
	if g.rec.timed || slot[0].Load() != w0 || slot[2].Load() != w2 || slot[3].Load() != w3 {
		slot[1].Store(0)
		slot[0].Store(w0)
		slot[2].Store(w2)
		slot[3].Store(w3)
		if g.rec.timed {
			slot[4].Store(uint64(time.Since(g.rec.base)))
			slot[5].Store(0)
			slot[6].Store(callRunning)
		}
	}
	slot[1].Store(w1)
	own := &g.rec.own[h.kind()&(kindLimit-1)]
	own.calls++
	own.bytes += h.count * uint64(h.dtype().Size())
	if h.seq&g.rec.mask == g.rec.mask {
		g.publishCounts(h.seq)
	}
}

// publishCounts publishes the counts up to call seq, the last of a lap
// of the ring, for Counts.
func (g *Group) publishCounts(seq uint64) {
	r := &g.rec
	r.pubGen.Add(1)
	for k := range r.own {
		r.pub[k].calls.Store(r.own[k].calls)
		r.pub[k].bytes.Store(r.own[k].bytes)
	}
	r.pubSeq.Store(seq)
	r.pubGen.Add(1)
}

// Counts returns, by kind, how many calls the group has begun and the
// bytes of their buffers. It may be called from any goroutine.
func (g *Group) Counts() (calls, bytes [kindLimit]uint64) {
	r := &g.rec
	for {
		gen := r.pubGen.Load()
		if gen&1 == 1 {
			continue // being published: a few stores
		}
		upTo := r.pubSeq.Load()
		for k := range calls {
			calls[k], bytes[k] = r.pub[k].calls.Load(), r.pub[k].bytes.Load()
		}
		// The calls after the publication are all still in the ring.
		for _, rec := range g.RecordsAfter(upTo, nil) {
			if rec.Seq <= upTo+r.mask+1 {
				k := rec.Kind & (kindLimit - 1)
				calls[k]++
				bytes[k] += uint64(rec.Bytes())
			}
		}
		if r.pubGen.Load() == gen {
			return calls, bytes
		}
	}
}

// Seq is the number of the latest call the group began (0 before the
// first). Like the calls, it belongs to the goroutine running them; other
// goroutines read Recent.
func (g *Group) Seq() uint64 { return g.seq }

// Ended records how the latest call ended, for a Timed recorder (the
// communicator calls it after each collective; an untimed recorder
// ignores it).
func (g *Group) Ended(err error) {
	if !g.rec.timed || g.seq == 0 {
		return
	}
	slot := &g.rec.slots[g.seq&g.rec.mask]
	if slot[1].Load() != g.seq || slot[5].Load() != 0 {
		return // overwritten, or ended already (a call that began none)
	}
	outcome := uint64(callDone)
	if err != nil {
		outcome = callFailed
	}
	slot[5].Store(uint64(time.Since(g.rec.base)))
	slot[6].Store(outcome)
}

// Record is one call in a group's flight recorder.
type Record struct {
	Seq   uint64
	Kind  Kind
	Algo  Algo
	DType reduce.DType
	Op    reduce.Op
	Count int
	Root  int // -1 where the kind has none
	// Start and End are the call's times when the recorder is Timed (End
	// zero while it runs); Failed says it ended in an error.
	Start, End time.Time
	Failed     bool

	h header
}

// Desc is the call as errors name it: "allreduce #3 (algo ring, 1024 x
// float32, sum)". It formats, so it is not worked out for every record.
func (r Record) Desc() string { return r.h.String() }

// Bytes is the size of the call's buffer (count elements).
func (r Record) Bytes() int { return r.Count * r.DType.Size() }

// Records returns the calls in the recorder, oldest first, appended to
// dst. It may be called from any goroutine.
func (g *Group) Records(dst []Record) []Record {
	start := len(dst)
	for i := range g.rec.slots {
		if r, ok := g.read(&g.rec.slots[i], 0); ok {
			dst = append(dst, r)
		}
	}
	sort.Slice(dst[start:], func(i, j int) bool { return dst[start+i].Seq < dst[start+j].Seq })
	return dst
}

// RecordsAfter appends to dst the calls after call seq still in the
// recorder, oldest first, reading only their slots: a trace writer
// drains the recorder with it. Calls the ring overwrote before they were
// read are skipped; the next call to pass after is the last returned.
func (g *Group) RecordsAfter(seq uint64, dst []Record) []Record {
	next := seq + 1
	for {
		slot := &g.rec.slots[next&g.rec.mask]
		got := slot[1].Load()
		switch {
		case got > next:
			// Overwritten by a later lap: those between are lost; the
			// oldest left is a lap behind the newest.
			next = got - g.rec.mask
			continue
		case got != next:
			return dst // not written yet (or being rewritten)
		}
		r, ok := g.read(slot, next)
		if !ok {
			return dst
		}
		dst = append(dst, r)
		next++
	}
}

// read reads a slot through its seqlock, expecting call want (0: any).
func (g *Group) read(slot *recSlot, want uint64) (Record, bool) {
	var w [4]uint64
	{
		seq := slot[1].Load()
		w[0], w[2], w[3] = slot[0].Load(), slot[2].Load(), slot[3].Load()
		start, end, outcome := slot[4].Load(), slot[5].Load(), slot[6].Load()
		if seq == 0 || slot[1].Load() != seq || want != 0 && seq != want {
			return Record{}, false // never written, or being rewritten
		}
		w[1] = seq
		var b [hdrLen]byte
		for j, x := range w {
			binary.LittleEndian.PutUint64(b[8*j:], x)
		}
		h, ok := parseHeader(b[:])
		if !ok {
			return Record{}, false
		}
		r := Record{Seq: w[1], Kind: h.kind(), Algo: h.algo(), DType: h.dtype(), Op: h.op(),
			Count: int(h.count), Root: -1, h: h}
		switch h.kind() {
		case Broadcast, Reduce, Gather, Scatter:
			r.Root = int(h.root)
		}
		if g.rec.timed {
			r.Start = g.rec.base.Add(time.Duration(start))
			if end != 0 {
				r.End = g.rec.base.Add(time.Duration(end))
			}
			r.Failed = outcome == callFailed
		}
		return r, true
	}
}

// Timed says whether the recorder reads the clock (Options.Timed).
func (g *Group) Timed() bool { return g.rec.timed }

// latest is the number of the newest call in the ring, 0 before the
// first: it walks forward from where a reader last found the newest, so
// its cost is the calls begun since, not the ring's size.
func (g *Group) latest() uint64 {
	r := &g.rec
	n := r.hint.Load()
	for {
		got := r.slots[(n+1)&r.mask][1].Load()
		switch {
		case got == n+1:
			n++
		case got > n+1:
			n = got // lapped since: jump to the newer lap
		default:
			r.hint.Store(n)
			return n
		}
	}
}

// Recent is the headers of the last calls this group began (up to
// recentCalls), as they travel, hdrLen bytes each; empty before the
// first. It may be read from any goroutine: a watchdog that sees a call
// wait for long publishes them where the other ranks compare them with
// theirs (Disagree).
func (g *Group) Recent() []byte {
	var b []byte
	last := g.latest()
	for seq := last; seq > 0 && last-seq < recentCalls; seq-- {
		r, ok := g.read(&g.rec.slots[seq&g.rec.mask], seq)
		if !ok {
			continue // rewritten meanwhile
		}
		w0, w1, w2, w3 := r.h.words()
		for _, x := range []uint64{w0, w1, w2, w3} {
			b = binary.LittleEndian.AppendUint64(b, x)
		}
	}
	return b
}

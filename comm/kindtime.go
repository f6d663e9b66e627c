package comm

import (
	"sync/atomic"
	"time"
)

// kindNames are the kinds of call Stats times, in the order of their
// counters; each is the name the call has in errors, Stats and traces.
var kindNames = [...]string{"allreduce", "broadcast", "barrier", "allgather", "reducescatter", "reduce",
	"gather", "scatter", "allgatherv", "reducescatterv", "alltoall", "alltoallv"}

// kindTimes is, by kind (kindNames), the time this rank's calls spent
// from their turn to their return, in nanoseconds.
type kindTimes [len(kindNames)]atomic.Int64

// kindIndex is what's place in kindNames, -1 for a call that is not a
// collective of those kinds (a split, a refused call). A switch, not a
// map: it is on every call's path.
func kindIndex(what string) int {
	switch what {
	case "allreduce":
		return 0
	case "broadcast":
		return 1
	case "barrier":
		return 2
	case "allgather":
		return 3
	case "reducescatter":
		return 4
	case "reduce":
		return 5
	case "gather":
		return 6
	case "scatter":
		return 7
	case "allgatherv":
		return 8
	case "reducescatterv":
		return 9
	case "alltoall":
		return 10
	case "alltoallv":
		return 11
	}
	return -1
}

// TimeCalls starts (on) or stops (off) timing this communicator's calls
// for Stats.Time. It is off by default: reading the clock before and
// after every call costs about 200 ns a call on a virtual machine whose
// clock is kvm-clock, as much as a whole one-rank allreduce. It may be
// called at any time, from any goroutine.
func (c *Communicator) TimeCalls(on bool) {
	if c != nil {
		c.ext.timing.Store(on)
	}
}

// took adds d to what's time.
func (t *kindTimes) took(what string, d time.Duration) {
	if i := kindIndex(what); i >= 0 {
		t[i].Add(int64(d))
	}
}

// into fills m with the kinds that took any time.
func (t *kindTimes) into(m map[string]time.Duration) {
	for i := range t {
		if d := t[i].Load(); d > 0 {
			m[kindNames[i]] = time.Duration(d)
		}
	}
}

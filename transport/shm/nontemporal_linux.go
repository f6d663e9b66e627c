package shm

import "time"

// copyLong copies a body of nonTemporalMin bytes or more into dst, its
// place in slot i of ring r, with the stores the receiver asks for or the
// sender's plan tries, timing the copy if the plan says so, and returns
// the mark for the slot header.
func (p *peer) copyLong(r *ring, i uint64, dst, body []byte) (mark uint32) {
	nt, timed := p.sender.plan(r.stores().Load() != 0, i, r.slots, len(body))
	var start time.Time
	if timed {
		start = time.Now()
	}
	if nt {
		streamCopy(dst, body)
		mark = markNonTemporal
	} else {
		copy(dst, body)
	}
	if timed {
		*r.copyNS(i) = uint32(min(time.Since(start), time.Second))
		mark |= markTimed
	}
	return mark
}

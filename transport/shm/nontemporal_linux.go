package shm

import "time"

// copyLong copies a body of nonTemporalMin bytes or more into slot i of
// ring r, dst, with the stores the
// receiver asks for or the sender's plan tries, and returns the mark for
// the slot header.
func (p *peer) copyLong(r *ring, i uint64, dst, body []byte) (mark uint32) {
	nt, timed := p.sender.plan(r.stores().Load() != 0, i, r.slots, len(body))
	if nt {
		mark = markNonTemporal
	}
	if !timed {
		if nt {
			streamCopy(dst, body)
		} else {
			copy(dst, body)
		}
		return mark
	}
	start := time.Now()
	if nt {
		streamCopy(dst, body)
	} else {
		copy(dst, body)
	}
	*r.copyNS(i) = uint32(min(time.Since(start), time.Second))
	return mark | markTimed
}

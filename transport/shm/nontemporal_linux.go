package shm

import "time"

// copyBody copies a message's body into slot i of ring r, dst, the
// message being number seq, choosing the stores for a long one, and
// returns the mark for the slot header.
func (p *peer) copyBody(r *ring, i, seq uint64, dst, body []byte) (mark uint32) {
	if len(body) < nonTemporalMin {
		copy(dst, body)
		return 0
	}
	nt, timed := p.sender.plan(r.stores().Load() != 0, seq, r.slots)
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

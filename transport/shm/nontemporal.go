package shm

// A long message written into a peer's slot with ordinary stores crosses
// between the cores twice per cache line: the sender's store first takes
// the line from the receiver, which read it a lap of the ring earlier, and
// the receiver's read then takes it back. Non-temporal stores skip the
// first: they write whole lines towards memory without reading them,
// and the receiver reads each line once. Where a line moves from core to
// core slower than from memory (as on the 2-vCPU machine whose figures
// are in docs/performance.md, "Non-temporal stores into the rings") that
// is the cheaper path from a few KiB up; below DefaultNonTemporalMin,
// and for the short messages whose latency is the point, the ordinary
// stores stay. The data stays the caller's: only the slot is written so.
// On amd64 only, with SSE2's MOVNTDQ, which every amd64 CPU has.

// DefaultNonTemporalMin is Options.NonTemporalMin's default.
const DefaultNonTemporalMin = 4 << 10

// copyBody copies a message's body into its slot, dst, with non-temporal
// stores from the transport's floor on.
func (t *Transport) copyBody(dst, body []byte) {
	if t.ntMin > 0 && len(body) >= t.ntMin {
		streamCopy(dst, body)
		return
	}
	copy(dst, body)
}

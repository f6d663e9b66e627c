//go:build linux

package shm

// The counters the tests read; a program learns of refused strangers
// from the log (internal/gate), and has no use for the others.

// Links is how many peers this rank is linked to now: one pair of rings
// and one socket each.
func (t *Transport) Links() int { return t.links.Linked() }

// Refused counts connections turned away: strangers, and peers that
// failed the handshake.
func (t *Transport) Refused() int { return t.door.Refused() }

// PeerInProcess says whether this rank is linked to rank r, and if so
// whether r runs in this process (which a crowded wait yields to through
// the runtime, see mesh.YieldCPU).
func (t *Transport) PeerInProcess(r int) (local, linked bool) {
	p := t.lookup(r)
	if p == nil {
		return false, false
	}
	return p.local, true
}

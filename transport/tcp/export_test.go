//go:build unix

package tcp

// The counters the tests read; a program learns of refused strangers
// from the log (internal/gate), and has no use for the others.

// Links is how many peers this rank is linked to now.
func (t *Transport) Links() int { return t.links.Linked() }

// AddressLookups is how many peer addresses this rank has fetched from
// the store: one per dial.
func (t *Transport) AddressLookups() int { return t.links.Dials() }

// Refused counts connections to the data port turned away (strangers,
// wrong tokens, other communicators) while it was open.
func (t *Transport) Refused() int { return t.door.Refused() }

package comm

// drainTrace writes the calls finished since the last drain (all of
// them, running ones too, at the end) to the rank's GOCOLL_TRACE file
// (internal/calltrace). Only the watchdog and Close call it, one after
// the other.
func (c *Communicator) drainTrace(final bool) {
	if c.trace == nil {
		return
	}
	c.traceMu.Lock()
	defer c.traceMu.Unlock()
	recs := c.g.RecordsAfter(c.traced, nil)
	if !final {
		// The latest may still run: it waits for the next drain.
		for len(recs) > 0 && recs[len(recs)-1].End.IsZero() {
			recs = recs[:len(recs)-1]
		}
	}
	if len(recs) == 0 {
		return
	}
	c.traced = recs[len(recs)-1].Seq
	c.trace.Write(c.names().JobRank(c.cfg.Rank), c.ext.name, recs)
}

package comm

import (
	"context"
	"fmt"
	"time"

	"github.com/gocoll/gocoll/internal/watch"
	"github.com/gocoll/gocoll/transport"
)

// watch runs the communicator's watchdog (internal/watch) until c is
// closed or aborted, or it failed a collective.
func (c *Communicator) watch() {
	w := watch.Watchdog{Comm: (*watched)(c), Closed: c.closed, Aborted: c.aborted, Leavers: c.leavers,
		Elastic: c.elastic, Names: c.names(), Timeout: c.timeout, Stall: c.stallAfter}
	w.Links, _ = c.t.(transport.LossNotifier)
	if c.elastic {
		w.Members, _ = c.ext.mux.Transport().(transport.LossNotifier)
	}
	if c.calls != nil {
		w.Store = c.calls
	}
	w.Run()
}

// watched is a communicator as its watchdog sees it (watch.Comm).
type watched Communicator

func (w *watched) Running() (uint64, bool) { return w.turns.inFlight() }

func (w *watched) Bounded(turn uint64) bool { return w.bounded.Load() == turn+1 }

func (w *watched) Observe(now time.Time, running bool) {
	c := (*Communicator)(w)
	c.observe(now, running)
	c.drainTrace(false)
}

func (w *watched) Probe() error {
	mm, _ := (*Communicator)(w).probe(context.Background())
	return mm
}

func (w *watched) Absent() string {
	c := (*Communicator)(w)
	_, at := c.probe(context.Background())
	return c.board().Absent(c.g.Recent(), at)
}

func (w *watched) PublishMismatch(err error) { (*Communicator)(w).publishMismatch(err) }

func (w *watched) Stalled(now time.Time) {
	c := (*Communicator)(w)
	call := c.status(now).Call
	if c.ext.name != "" {
		call += " of " + c.ext.name
	}
	go c.requestReport(call, fmt.Sprintf("%s: %s has waited %v (GOCOLL_STALL)", c.names().WhoIs(c.cfg.Rank), call, c.stallAfter))
}

func (w *watched) Fail(err error) { (*Communicator)(w).setFault(err) }

func (w *watched) Lost(err error) {
	w.faultMu.Lock()
	w.lostErr = err
	w.faulted.Store(true)
	w.faultMu.Unlock()
}

// Package gate bounds what strangers can cost a listener of a job before
// they authenticate: the rendezvous store's, a rank's TCP listener and its
// shared-memory one.
//
// A Gate holds at most Max connections that have not yet authenticated;
// the accept loop takes a slot before it accepts, so past Max the
// connections wait in the kernel's backlog, costing this process no
// descriptor, and the listener serves them as slots free. Each connection
// must authenticate within its listener's handshake deadline, so a stranger
// that says nothing holds a slot for that long at most.
//
// Refusals are logged at warn, the first of a quiet spell in full and the
// rest as one summary line per Every: "rendezvous: refused 35116
// connections from 2 addresses in 45 s". A flood of strangers thus writes a
// few lines, not one per connection.
package gate

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Max is the default number of connections a listener authenticates at
// once. A job's ranks all dial the store, and one another, at start; past
// Max they wait in the backlog for a few milliseconds, not fail.
const Max = 256

// Every is how often refusals are summarised.
const Every = 10 * time.Second

// Gate is one listener's pre-authentication limit and refusal log.
type Gate struct {
	what  string // the listener, as log lines name it: "rendezvous", "tcp", "shm"
	log   *slog.Logger
	attrs []any
	every time.Duration
	slots chan struct{}

	mu      sync.Mutex
	pending int                 // refusals since the last line
	addrs   map[string]struct{} // their addresses
	since   time.Time           // the first of them
	timer   *time.Timer         // writes the summary
	closed  bool
	peak    int
}

// New makes a gate of max slots for the listener named what, logging to
// log with attrs (such as "rank", 3) on every line, summarising every
// period.
func New(what string, max int, every time.Duration, log *slog.Logger, attrs ...any) *Gate {
	return &Gate{what: what, log: log, attrs: attrs, every: every, slots: make(chan struct{}, max), addrs: map[string]struct{}{}}
}

// Acquire takes a slot, waiting while all are taken; false when ctx ends
// first.
func (g *Gate) Acquire(ctx context.Context) bool {
	select {
	case g.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	g.mu.Lock()
	g.peak = max(g.peak, len(g.slots))
	g.mu.Unlock()
	return true
}

// Release gives back a slot Acquire took, once its connection has
// authenticated or been refused.
func (g *Gate) Release() { <-g.slots }

// Peak is the most slots ever taken at once.
func (g *Gate) Peak() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.peak
}

// Refuse records a connection refused before or during authentication:
// logged in full if it is the first since the last line, else counted
// for the next summary.
func (g *Gate) Refuse(remote net.Addr, err error) {
	addr := "a local process"
	if remote != nil && remote.String() != "" {
		addr = remote.String()
		if h, _, serr := net.SplitHostPort(addr); serr == nil {
			addr = h
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	if g.timer == nil {
		// Quiet until now: say this one in full, summarise what follows.
		g.log.Warn(g.what+": refused a connection", append([]any{"remote", addr, "err", err}, g.attrs...)...)
		g.timer = time.AfterFunc(g.every, g.flush)
		g.since = time.Now()
		return
	}
	g.pending++
	g.addrs[addr] = struct{}{}
}

// flush writes the summary of the refusals since the last line; after a
// period with none, the spell ends and the next refusal is said in full.
func (g *Gate) flush() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	if g.pending == 0 {
		g.timer = nil
		return
	}
	g.summarise()
	g.timer = time.AfterFunc(g.every, g.flush)
}

// summarise writes the line for the pending refusals; g.mu is held.
func (g *Gate) summarise() {
	g.log.Warn(fmt.Sprintf("%s: refused %s from %s in %s", g.what, plural(g.pending, "connection"),
		plural(len(g.addrs), "address"), seconds(time.Since(g.since))), g.attrs...)
	g.pending, g.addrs, g.since = 0, map[string]struct{}{}, time.Now()
}

// Close writes the last summary; later refusals are not logged.
func (g *Gate) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	g.closed = true
	if g.timer != nil {
		g.timer.Stop()
	}
	if g.pending > 0 {
		g.summarise()
	}
}

func plural(n int, what string) string {
	switch {
	case n == 1:
		return "1 " + what
	case what == "address":
		return fmt.Sprintf("%d addresses", n)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func seconds(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%d s", int(d.Round(time.Second).Seconds()))
}

package mesh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocoll/gocoll/transport"
)

// Links makes a rank's links to its peers on demand, for a transport
// whose links are connections it dials or accepts (tcp, shm).
//
// The first call that needs a peer links it (Link); the transport
// accepts, for as long as it is open, whoever dials it, and asks Admit
// whether to keep each connection. Either end of a pair may be the first
// to need the link, so either may dial: waiting for the other end to dial
// could deadlock a rank whose Send goes to a peer busy receiving from a
// third rank, itself waiting on the first. When both ends dial at once
// (the lower rank gives the higher one Grace first), the connection the
// higher rank dialed wins: the lower rank declines the other, a decision
// each end takes under mu against what it is doing itself, so that
// exactly one link per pair survives.
type Links[T any] struct {
	rank  int
	peers []atomic.Pointer[T]
	cfg   LinkConfig[T]

	life    context.Context // ends at Shut: cuts dials and handshakes short
	endLife context.CancelFunc
	bg      sync.WaitGroup

	mu          sync.Mutex
	shut        bool
	linked      int
	attempts    map[int]*Attempt
	unreachable map[int]error
	note        chan struct{} // closed and replaced at each new link
	dials       atomic.Int64  // dials started, for Dials
}

// LinkConfig is what a transport plugs into Links.
type LinkConfig[T any] struct {
	// Dial reaches peer r and shakes hands. declined means r is dialing
	// this rank at the same time and its connection is the one to keep.
	// An error makes r unreachable (lost) unless Transient says otherwise
	// or Links was shut meanwhile.
	Dial func(ctx context.Context, r int) (p *T, declined bool, err error)
	// Transient says a failed dial may be tried again (a handshake that
	// timed out on an overloaded host): the calls that wait dial again.
	Transient func(err error) bool
	// Linked runs, under Links' lock, when p becomes the link to r: the
	// transport starts watching it. It must not block.
	Linked func(r int, p *T)
	// Unreachable runs, under Links' lock, when r is found lost before
	// it was linked. It must not block.
	Unreachable func(r int, err error)
	// Discard releases a link made after Shut, or a second one to a peer.
	Discard func(p *T)
	// Grace is how long a rank that needs a link to a higher rank waits
	// for that rank to dial first (see DialGrace).
	Grace time.Duration
	// DeclineWait bounds how long a dial that was declined waits for the
	// peer's own connection before the calls that need it try again.
	DeclineWait time.Duration
}

// DialGrace is the default Grace. Most first contacts are both ends of an
// exchange reaching for each other at once (recursive doubling, pairwise
// alltoall, a ring's two neighbours): the higher rank dials at once, and
// the lower one, waiting a moment, spares the pair a second handshake
// that would only be declined. Where the higher rank is busy elsewhere,
// the lower one dials after the grace: a first message late by this much,
// once per pair, and never a deadlock.
const DialGrace = 20 * time.Millisecond

// errShut is returned by Link once Shut was called.
var errShut = errors.New("links shut")

// Attempt is a link to one peer in the making: an outgoing dial, an
// incoming connection admitted, or both at once. Calls that need the
// peer wait on Done, which closes once the link is up or every attempt
// has ended; then they look again. Its owner's lock guards it (Links',
// or rdma's, whose queue pairs outlive their exchanges).
type Attempt struct {
	done    chan struct{}
	closed  bool
	Out, In int // attempts of each kind in flight
}

// NewAttempt returns an attempt with none in flight yet.
func NewAttempt() *Attempt { return &Attempt{done: make(chan struct{})} }

// Done is closed by Finish.
func (a *Attempt) Done() <-chan struct{} { return a.done }

// Finish wakes the calls waiting on a; later calls do nothing.
func (a *Attempt) Finish() {
	if !a.closed {
		a.closed = true
		close(a.done)
	}
}

// End records the end of one attempt, out or in, and reports whether it
// was the last in flight (a is then finished, and its owner forgets it).
func (a *Attempt) End(out bool) bool {
	if out {
		a.Out--
	} else {
		a.In--
	}
	if a.Out == 0 && a.In == 0 {
		a.Finish()
		return true
	}
	return false
}

// NewLinks returns the links of rank among size ranks, none made yet.
func NewLinks[T any](rank, size int, cfg LinkConfig[T]) *Links[T] {
	if cfg.Grace == 0 {
		cfg.Grace = DialGrace
	}
	if cfg.DeclineWait == 0 {
		cfg.DeclineWait = DefaultHandshake
	}
	l := &Links[T]{rank: rank, peers: make([]atomic.Pointer[T], size), cfg: cfg,
		attempts: make(map[int]*Attempt), unreachable: make(map[int]error), note: make(chan struct{})}
	l.life, l.endLife = context.WithCancel(context.Background())
	return l
}

// Get is the link to r, or nil if there is none (yet, or r is no peer).
// Small enough to inline: every message's path asks it.
func (l *Links[T]) Get(r int) *T {
	if uint(r) < uint(len(l.peers)) {
		return l.peers[r].Load()
	}
	return nil
}

// Life ends when Shut is called: handshakes in flight watch it.
func (l *Links[T]) Life() context.Context { return l.life }

// Go runs f in the background, counted so that Wait waits for it,
// unless Links was shut: then it reports false and runs nothing.
func (l *Links[T]) Go(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shut {
		return false
	}
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		f()
	}()
	return true
}

// Link returns the link to r, making it first if there is none. r must be
// a peer (the caller checks). The error is ctx's, errShut, or why r is
// unreachable.
func (l *Links[T]) Link(ctx context.Context, r int) (*T, error) {
	if p := l.peers[r].Load(); p != nil {
		return p, nil
	}
	graceEnd := time.Now().Add(l.cfg.Grace)
	var grace *time.Timer
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	for {
		l.mu.Lock()
		if p := l.peers[r].Load(); p != nil {
			l.mu.Unlock()
			return p, nil
		}
		if l.shut {
			l.mu.Unlock()
			return nil, errShut
		}
		if err := l.unreachable[r]; err != nil {
			l.mu.Unlock()
			return nil, err
		}
		a := l.attempts[r]
		var wait <-chan struct{}
		var timeout <-chan time.Time
		if a == nil && r > l.rank && time.Until(graceEnd) > 0 {
			// r dials us: give it a moment to (see DialGrace).
			if grace == nil {
				grace = time.NewTimer(time.Until(graceEnd))
			}
			wait, timeout = l.note, grace.C
		} else {
			if a == nil {
				a = l.dialLocked(r)
			}
			wait = a.Done()
		}
		l.mu.Unlock()
		select {
		case <-wait:
		case <-timeout:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-l.life.Done():
			return nil, errShut
		}
	}
}

// Reach is Link as a transport's call doing op reports it: any error is
// a *transport.PeerError naming r, errShut becoming transport.ErrClosed.
func (l *Links[T]) Reach(ctx context.Context, r int, op string) (*T, error) {
	p, err := l.Link(ctx, r)
	if errors.Is(err, errShut) {
		err = transport.ErrClosed
	}
	if err != nil {
		return nil, &transport.PeerError{Peer: r, Op: op, Err: err}
	}
	return p, nil
}

// dialLocked starts dialing r in the background, so that the dial
// outlives the call that needed it (another may need it too, and a
// cancelled call must not leave the pair half-linked). Called with mu
// held, not shut.
func (l *Links[T]) dialLocked(r int) *Attempt {
	a := l.attempts[r]
	if a == nil {
		a = NewAttempt()
		l.attempts[r] = a
	}
	a.Out++
	l.dials.Add(1)
	l.bg.Add(1)
	go l.dial(r, a)
	return a
}

// dial runs one outgoing attempt on r.
func (l *Links[T]) dial(r int, a *Attempt) {
	defer l.bg.Done()
	p, declined, err := l.cfg.Dial(l.life, r)
	if err == nil && !declined {
		l.register(r, p)
	}
	if declined {
		timer := time.NewTimer(l.cfg.DeclineWait)
		select {
		case <-a.Done(): // r's connection arrived (register finished a)
		case <-timer.C: // r's dial may have failed at its end: look again
		case <-l.life.Done():
		}
		timer.Stop()
	}
	if err != nil && (l.life.Err() != nil || l.cfg.Transient != nil && l.cfg.Transient(err)) {
		err = nil // Shut cut it short, or worth another try: not a loss
	}
	l.end(r, a, true, err)
}

// end records the end of one attempt on r, with err if it makes r lost.
// The last attempt to end forgets a and wakes the calls waiting on it.
func (l *Links[T]) end(r int, a *Attempt, out bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil && l.peers[r].Load() == nil && !l.shut && l.unreachable[r] == nil {
		l.unreachable[r] = err
		if l.cfg.Unreachable != nil {
			l.cfg.Unreachable(r, err)
		}
	}
	if a.End(out) && l.attempts[r] == a {
		delete(l.attempts, r)
	}
}

// register makes p the link to r, or discards it if Links was shut or r
// is linked already.
func (l *Links[T]) register(r int, p *T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shut || l.peers[r].Load() != nil {
		l.cfg.Discard(p)
		return
	}
	l.peers[r].Store(p)
	l.linked++
	if l.cfg.Linked != nil {
		l.cfg.Linked(r, p)
	}
	if a := l.attempts[r]; a != nil {
		a.Finish()
	}
	close(l.note)
	l.note = make(chan struct{})
}

// Admit decides, on the accepting end, whether to keep a connection from
// r that shook hands: not if the pair is linked already, or if both ends
// are dialing and ours, the higher rank's, wins. If it says yes, the
// caller finishes the link and hands it, or nil if that failed, to
// Admitted.
func (l *Links[T]) Admit(r int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.attempts[r]
	if l.shut || l.peers[r].Load() != nil || a != nil && (a.In > 0 || a.Out > 0 && r < l.rank) {
		return false
	}
	if a == nil {
		a = NewAttempt()
		l.attempts[r] = a
	}
	a.In++
	return true
}

// Admitted ends an admission Admit allowed: p is the link to r, or nil
// if it failed, which loses nobody (the calls waiting on r dial
// themselves).
func (l *Links[T]) Admitted(r int, p *T) {
	if p != nil {
		l.register(r, p)
	}
	l.mu.Lock()
	a := l.attempts[r]
	l.mu.Unlock()
	if a != nil {
		l.end(r, a, false, nil)
	}
}

// All links every peer at once, for an eager Connect: this rank dials
// the lower ranks and waits for the higher ones to dial it, so that the
// job connects in the time of its slowest link. The first peer found
// unreachable fails it, as ctx does.
func (l *Links[T]) All(ctx context.Context) (int, error) {
	l.mu.Lock()
	if l.shut {
		l.mu.Unlock()
		return -1, errShut
	}
	for r := 0; r < l.rank; r++ {
		if l.peers[r].Load() == nil && l.attempts[r] == nil {
			l.dialLocked(r)
		}
	}
	l.mu.Unlock()
	for {
		l.mu.Lock()
		linked, note := l.linked, l.note
		for r, err := range l.unreachable {
			l.mu.Unlock()
			return r, err
		}
		var pending *Attempt
		for r := 0; r < l.rank && pending == nil; r++ {
			if l.peers[r].Load() == nil && l.attempts[r] == nil {
				// A dial that timed out ended without a loss: again.
				pending = l.dialLocked(r)
			}
		}
		l.mu.Unlock()
		if linked == len(l.peers)-1 {
			return -1, nil
		}
		select {
		case <-note:
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-l.life.Done():
			return -1, errShut
		case <-time.After(50 * time.Millisecond):
			// A loss among the dials wakes no one: look again.
		}
	}
}

// Open opens the door of a transport listening on ln: it admits whoever
// dials (door.Serve, each connection handed to admit), publishes addr,
// where ln is reached, under key in store, and with eager links every
// peer at once (All), then closes ln: the mesh is built. what names the
// transport in the errors.
func (l *Links[T]) Open(ctx context.Context, what string, ln net.Listener, door *Door, admit func(net.Conn), store transport.Store, key, addr string, eager bool) error {
	if !l.Go(func() { door.Serve(l.life, ln, l.Go, admit) }) {
		ln.Close()
		return fmt.Errorf("%s: listen: %w", what, transport.ErrClosed)
	}
	if err := store.Put(ctx, key, []byte(addr)); err != nil {
		return fmt.Errorf("%s: publish address: %w", what, err)
	}
	if !eager {
		return nil
	}
	if r, err := l.All(ctx); err != nil {
		if r >= 0 {
			err = &transport.PeerError{Peer: r, Op: "connect to", Err: err}
		}
		return fmt.Errorf("%s: building the mesh: %w", what, err)
	}
	ln.Close()
	return nil
}

// Each calls f on every link; after Shut the set no longer changes.
func (l *Links[T]) Each(f func(r int, p *T)) {
	for r := range l.peers {
		if p := l.peers[r].Load(); p != nil {
			f(r, p)
		}
	}
}

// Linked is how many peers are linked now.
func (l *Links[T]) Linked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.linked
}

// Dials is how many dials Links started: each looks the peer's address
// up in the store once.
func (l *Links[T]) Dials() int { return int(l.dials.Load()) }

// Shut stops links from forming: no more dials or admissions, and those
// in flight are cut short (their links discarded). Wait waits for them.
func (l *Links[T]) Shut() {
	l.mu.Lock()
	l.shut = true
	l.mu.Unlock()
	l.endLife()
}

// Wait waits for the dials and the work started by Go to end.
func (l *Links[T]) Wait() { l.bg.Wait() }

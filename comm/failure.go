package comm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gocoll/gocoll/internal/blame"
	"github.com/gocoll/gocoll/transport"
)

// failed is the error of a collective that failed with err, and breaks
// the communicator unless the ranks are still in step.
func (c *Communicator) failed(what string, err error) error {
	if isRefusal(err) {
		return c.refused(what, err)
	}
	if uerr := c.unusable(); uerr != nil {
		// Close or Abort woke the call; that, not the transport's view of
		// it, is the cause.
		if errors.Is(uerr, ErrAborted) {
			c.setBroken(uerr)
		}
		return c.callError(what, true, uerr)
	}
	if ferr := c.faultErr(); ferr != nil {
		ferr = c.callError(what, true, c.withLosses(ferr))
		c.setBroken(ferr)
		c.board().SayGaveUp()
		c.log.Info("collective failed", "err", ferr, "chain", blame.ChainOf(ferr))
		return ferr
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// Name the ranks this call still waited for: those that never
		// reached it (the waiting ones publish theirs, see probe).
		_, at := c.probe(context.Background())
		err = fmt.Errorf("%w%s: %w", ErrTimeout, c.board().Absent(c.g.Recent(), at), err)
	}
	if errors.Is(err, transport.ErrClosed) && c.kill != nil {
		// The job's communicator failed and dropped the links every
		// communicator shares.
		err = fmt.Errorf("%w: the job's connections were dropped: %w", ErrPeerLost, err)
	}
	switch {
	case errors.Is(err, ErrMismatch):
		// Published before the links drop, so that the peers that see
		// them go can find out why (the case below, on their side).
		c.probe(context.Background())
		c.publishMismatch(err)
	case errors.Is(err, ErrPeerLost):
		err = c.explainLoss(err)
	}
	err = c.callError(what, true, err)
	c.setBroken(err)
	c.board().SayGaveUp()
	// The ranks are out of step now, and a peer may be waiting for data
	// this rank will never send. Dropping the connections tells every peer
	// at once (their calls fail with ErrPeerLost naming this rank) instead
	// of leaving them to hang until their own deadlines. The peers read
	// the one line as the reason this rank gave up.
	c.drop(err)
	c.log.Info("communicator broken; "+c.howPeersLearn(), "err", err, "chain", blame.ChainOf(err))
	return err
}

func (c *Communicator) setBroken(err error) { c.broken.Store(&err) }

// refused is the error of a call this rank refused for its arguments
// (ErrInvalid), before sending anything. The other ranks are in that call,
// or will be, and cannot see the refusal: they would wait for this rank,
// and their later calls would pair with its earlier ones. So a refusal
// breaks the communicator like any failure part-way: the reason goes to
// the store, the links drop, and the others' call fails within moments
// with ErrMismatch saying which rank refused what. Only a job of one rank
// carries on.
func (c *Communicator) refused(what string, err error) error {
	if !strings.HasPrefix(err.Error(), "comm: ") {
		err = fmt.Errorf("comm: %s: %w", what, err)
	}
	if c.cfg.Size == 1 {
		return err
	}
	if uerr := c.unusable(); uerr != nil {
		return err
	}
	c.setBroken(err)
	why := strings.TrimSuffix(strings.TrimPrefix(err.Error(), "comm: "), ": "+ErrInvalid.Error())
	c.publishFault(true, fmt.Sprintf("%s refused its %s", c.names().WhoIs(c.cfg.Rank), why))
	c.drop(err)
	return fmt.Errorf("%w (the other ranks were told; the communicator is broken)", err)
}

// skipped is the error of a collective whose context ended before it
// started. Nothing was sent, but the other ranks are in that call, or will
// be: they would wait for this rank, and its next call would pair with
// theirs (the same number, so the same shape would even pass unnoticed).
// So, as a refusal, it breaks the communicator and tells them: their call
// fails within moments with ErrPeerLost saying this rank gave it up.
// Only a job of one rank carries on.
func (c *Communicator) skipped(what string, cause error) error {
	err := fmt.Errorf("%s: %s given up before it started: %w", c.names().Prefix(), what, cause)
	if c.cfg.Size == 1 || c.unusable() != nil {
		return err
	}
	if c.breakFor(err) {
		c.tellSkipped(err)
	}
	return fmt.Errorf("%w (the other ranks were told; the communicator is broken)", err)
}

// breakFor breaks the communicator for a collective given up before it
// started (see skipped), once its turn has come, unless it needs none (a
// job of one rank) or has one already; it reports whether it did.
func (c *Communicator) breakFor(err error) bool {
	if c.cfg.Size == 1 || c.unusable() != nil || c.broken.Load() != nil {
		return false
	}
	c.setBroken(err)
	return true
}

// tellSkipped tells the other ranks that this one gave up a call before
// it started, and drops the links (see skipped).
func (c *Communicator) tellSkipped(err error) {
	c.publishFault(false, fmt.Sprintf("%s gave up a call before it started: %v", c.names().WhoIs(c.cfg.Rank),
		strings.TrimPrefix(err.Error(), c.names().Prefix()+": ")))
	c.drop(err)
}

// explainLoss adds to err, a failure through a lost peer, why the peer
// went: the mismatch or refusal a rank published before dropping its
// links (then the losses that followed need no listing), else every loss
// and departure seen (withLosses).
func (c *Communicator) explainLoss(err error) error {
	if !errors.Is(err, ErrPeerLost) {
		return err
	}
	if mm, _ := c.probe(context.Background()); mm != nil {
		return blame.Also(mm, err)
	}
	if errors.Is(err, transport.ErrPeerClosed) {
		if left := c.board().ClosedBefore(); left != nil {
			return blame.Also(left, err)
		}
	}
	return c.withLosses(err)
}

// withLosses adds to err, a failure through a lost peer, every peer the
// transport has seen lost by now. The link that failed first here may be
// to a rank that only gave up because another died, and could not say so
// (its connection to us was mid-frame); the list names the rank that died.
func (c *Communicator) withLosses(err error) error {
	if !errors.Is(err, ErrPeerLost) {
		return err
	}
	var notes []string
	if ln, ok := c.t.(transport.LossNotifier); ok {
		text := err.Error()
		for _, pe := range blame.Lost(ln.LostErr()) {
			// Ranks that gave up say why themselves; repeating each
			// one's story would bury the rank that died.
			if t := pe.Err.Error(); !strings.Contains(text, t) && !strings.Contains(t, " gave up: ") {
				notes = append(notes, fmt.Sprintf("rank %d: %v", pe.Peer, pe.Err))
			}
		}
	}
	if len(notes) > 0 {
		err = fmt.Errorf("%w (also lost: %s)", err, strings.Join(notes, "; "))
	}
	return c.withDepartures(err)
}

// leave tells the store this rank is out: why is empty at a normal Close,
// else the cause of the break, which the others then see.
func (c *Communicator) leave(why string) {
	if c.store == nil {
		return
	}
	if len(why) > 300 {
		why = why[:297] + "..."
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	c.store.Leave(ctx, why)
}

// setFault records why the running collective must fail and wakes it by
// closing the transport, which also tells every peer.
func (c *Communicator) setFault(err error) {
	c.faultMu.Lock()
	if c.fault == nil {
		c.fault = err
	}
	c.faulted.Store(true)
	c.faultMu.Unlock()
	c.log.Info("communicator fault; "+c.howPeersLearn(), "err", err)
	// The peers read the one line as the reason this rank gave up.
	cause := err
	if c.kill != nil {
		// A sub-communicator's members read it in the store, the first
		// reason only: let it name the culprit from the store's record
		// of the departure, as their own errors would, not from the
		// link that happened to fail here first.
		cause = c.withLosses(err)
	}
	c.drop(c.callError("", c.latestRunning(), cause))
}

func (c *Communicator) faultErr() error {
	c.faultMu.Lock()
	defer c.faultMu.Unlock()
	if c.fault != nil {
		return c.fault
	}
	return c.lostErr
}

// unusable is ErrClosed after Close, the abort error after Abort, else nil.
func (c *Communicator) unusable() error {
	if !c.stopping.Load() {
		return nil
	}
	select {
	case <-c.closed:
		return ErrClosed
	default:
	}
	select {
	case <-c.aborted:
		return c.abortErr
	default:
	}
	return nil
}

// Abort breaks the communicator from any goroutine, as ncclCommAbort does:
// every collective pending on this rank returns an error wrapping
// ErrAborted and reason, so does every later one, and the connections are
// dropped, so that the peers' pending and later calls fail with ErrPeerLost
// naming this rank instead of waiting for it. Abort does not wait for the
// peers; Close must still be called to release the rest. Only the first
// Abort counts.
//
// In an elastic job (see Shrink) Abort ends the communicator, not the
// rank's membership of the job: as ULFM's revoke, the connections stay
// up, the peers' calls fail with ErrPeerLost carrying reason (they read
// it in the rendezvous store, within tens of milliseconds), and every
// rank, this one included, may then Shrink to go on.
func (c *Communicator) Abort(reason error) {
	if c == nil {
		return
	}
	c.abortOnce.Do(func() {
		if reason == nil {
			reason = errors.New("no reason given")
		}
		c.abortErr = fmt.Errorf("%w: %w", ErrAborted, reason)
		c.stopping.Store(true)
		close(c.aborted)
		c.log.Info("communicator aborted; dropping its connections", "reason", reason)
		c.drop(c.abortErr)
	})
}

// leftBecause is what a sub-communicator's rank that ends it for cause
// tells the other members: the rank at the root of it where that is
// another (a member lost, which the others may see only through this
// rank, or a job rank outside it, whose loss broke the links the job
// shares), else that this rank left and why.
func (c *Communicator) leftBecause(cause error) string {
	var ce *CallError
	if errors.As(cause, &ce) && ce.Culprit >= 0 && ce.Culprit != c.cfg.Rank && strings.HasPrefix(ce.Cause, c.names().WhoIs(ce.Culprit)+" ") {
		return ce.Cause
	}
	if ce != nil && ce.Culprit < 0 && ce.JobCulprit >= 0 && strings.HasPrefix(ce.Cause, c.names().JobWho(ce.JobCulprit)+" ") {
		return ce.Cause
	}
	return fmt.Sprintf("%s left the communicator: %v", c.names().WhoIs(c.cfg.Rank), cause)
}

// howPeersLearn says, for the log, how drop tells the peers.
func (c *Communicator) howPeersLearn() string {
	if c.kill != nil {
		return "ended it alone, its links kept; the peers read why in the store"
	}
	return "dropped its connections so the peers notice"
}

// drop cuts every connection so that the peers see this rank lost and stop
// waiting for it: at once where the transport can abort, else by an
// orderly Close, which lingers for the peers' goodbyes (a peer busy
// computing may not send one for a while, and the caller need not wait).
func (c *Communicator) drop(cause error) {
	if c.t == nil {
		return
	}
	if c.kill != nil {
		// A sub-communicator's links are the job's, and the job and its
		// other communicators go on (as ncclCommAbort on a split
		// communicator): only this one ends. Its running call wakes, its
		// late messages are dropped, and the other members, which see
		// no link go, read why in the store when their call stalls.
		c.publishFault(false, c.leftBecause(cause))
		c.kill(cause)
		if c.ext.ch != nil {
			c.ext.ch.Close()
		}
		return
	}
	if cause != nil {
		// Not waited for here (the store may be slow, the caller need
		// not be), but by Close: the reason must reach the store before
		// the process can exit, or grun's word of the exit overtakes it.
		c.leavingMu.Lock()
		if !c.leavingDone {
			c.leaving.Add(1)
			go func() {
				defer c.leaving.Done()
				c.leave(cause.Error())
			}()
		}
		c.leavingMu.Unlock()
	}
	if a, ok := c.t.(transport.Aborter); ok {
		a.Abort(cause)
		return
	}
	go c.t.Close()
}

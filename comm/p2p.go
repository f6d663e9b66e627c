package comm

import (
	"context"
	"errors"
	"fmt"

	"github.com/gocoll/gocoll/collectives"
)

// MaxTag is the largest tag.
const MaxTag = collectives.MaxTag

// ErrTruncated: Recv got a message longer than its buffer. The message was
// consumed whole (the next Recv gets the next message); the buffer holds
// its start.
var ErrTruncated = collectives.ErrTruncated

func (c *Communicator) p2pCheck(ctx context.Context, what string, peer, tag int) error {
	if c == nil {
		return errNil(what)
	}
	if ctx == nil {
		return errNilContext(what)
	}
	if err := c.unusable(); err != nil {
		return fmt.Errorf("%s: %s: %w", c.names().Prefix(), what, err)
	}
	if peer < 0 || peer >= c.Size() {
		return fmt.Errorf("comm: %s: peer %d out of range [0, %d): %w", what, peer, c.Size(), ErrInvalid)
	}
	if tag < 0 || tag > MaxTag {
		return fmt.Errorf("comm: %s: tag %d out of range [0, %d]: %w", what, tag, MaxTag, ErrInvalid)
	}
	return nil
}

// bound applies the communicator's timeout to a ctx without a deadline.
func (c *Communicator) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || c.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}

// Send sends buf to rank peer with tag: a point-to-point message.
//
// Matching: a message goes to the Recv for the same (sender, tag) on the
// same communicator; messages of one (sender, tag) are received in the
// order their Sends were called (Sends from several goroutines to one
// (peer, tag) are ordered by whichever starts first). Tags are in
// [0, MaxTag]. Messages of different tags or peers are independent, and
// never mix with collectives: each has its own lane on the shared
// connections (see collectives.Mux).
//
// Blocking: Send returns once the whole message is in the receiver's
// slots or in its queue of unexpected messages. The receiving rank drains
// its connection from a peer whenever any of its goroutines receives from
// that peer (a Recv or a collective), copying messages for other lanes
// into their queues, so Send blocks only while the receiver reads nothing
// at all from this rank and the slots are full: a message up to a few
// slots long (the transport's, see tcp.Options) is sent eagerly, a longer
// one waits for the receiver. Recv blocks until a matching message
// arrives. Both honour ctx, and when ctx has no deadline, the
// communicator's timeout (WithTimeout, GOCOLL_TIMEOUT).
//
// Deadlock freedom: SendRecv sends and receives at the same time (the send
// from a goroutine of its own), so every rank of a ring or a pairwise
// exchange can call it at once without any ordering, whatever the sizes.
// Two ranks that both Send a large message to each other before calling
// Recv may wait for each other, as with MPI_Send; use SendRecv.
//
// A failed Send or Recv does not break the communicator: a cancelled Send
// may have delivered part of a message, which the peer then cannot match,
// and the program should stop using the communicator for that pair.
func Send[T Element](ctx context.Context, c *Communicator, peer, tag int, buf []T) error {
	if err := c.p2pCheck(ctx, "send", peer, tag); err != nil {
		return err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if err := c.ext.ch.SendTagged(ctx, peer, tag, bytesOf(buf)); err != nil {
		return c.p2pError(fmt.Sprintf("send to rank %d tag %d", peer, tag), err)
	}
	return nil
}

// Recv receives the next message from rank peer with tag into buf and
// returns how many elements it held. A message longer than buf fails
// with ErrTruncated; one that is not a whole number of elements (the
// sender used another type) with ErrMismatch.
func Recv[T Element](ctx context.Context, c *Communicator, peer, tag int, buf []T) (int, error) {
	if err := c.p2pCheck(ctx, "recv", peer, tag); err != nil {
		return 0, err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	b := bytesOf(buf)
	n, err := c.ext.ch.RecvTagged(ctx, peer, tag, b)
	es := dtypeOf[T]().Size()
	if err != nil {
		return n / es, c.p2pError(fmt.Sprintf("recv from rank %d tag %d", peer, tag), err)
	}
	if n%es != 0 {
		return n / es, fmt.Errorf("comm: rank %d: recv from rank %d tag %d: %d bytes are not a whole number of %v elements: %w",
			c.Rank(), peer, tag, n, dtypeOf[T](), ErrMismatch)
	}
	return n / es, nil
}

// SendRecv sends send to rank dest with sendTag while it receives from
// rank source with recvTag into recv, and returns how many elements it
// received. It cannot deadlock with a matching SendRecv on the peers,
// whatever the message sizes. send and recv must not overlap.
func SendRecv[T Element](ctx context.Context, c *Communicator, send []T, dest, sendTag int, recv []T, source, recvTag int) (int, error) {
	if err := c.p2pCheck(ctx, "sendrecv", dest, sendTag); err != nil {
		return 0, err
	}
	if err := c.p2pCheck(ctx, "sendrecv", source, recvTag); err != nil {
		return 0, err
	}
	if overlap(bytesOf(send), bytesOf(recv)) {
		return 0, fmt.Errorf("comm: sendrecv: send and recv overlap: %w", ErrInvalid)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sent := make(chan error, 1)
	go func() { sent <- Send(ctx, c, dest, sendTag, send) }()
	n, rerr := Recv(ctx, c, source, recvTag, recv)
	if rerr != nil && !errors.Is(rerr, ErrTruncated) {
		cancel() // the exchange failed: do not leave the send waiting
	}
	serr := <-sent
	if rerr != nil && errors.Is(serr, context.Canceled) && ctx.Err() != nil {
		// The send was cancelled because the receive failed: the
		// receive's error is the cause.
		return n, rerr
	}
	if serr != nil && rerr != nil {
		return n, &bothFailed{serr, rerr}
	}
	return n, errors.Join(serr, rerr)
}

// bothFailed is a SendRecv whose send and receive both failed: one line,
// the send's, as errors are; errors.Is and errors.As see both.
type bothFailed struct{ send, recv error }

func (e *bothFailed) Error() string   { return e.send.Error() }
func (e *bothFailed) Unwrap() []error { return []error{e.send, e.recv} }

func timedOut(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return err
}

// Package sentinel declares the errors package comm documents as its
// own sentinels (comm.ErrClosed, comm.ErrBroken, comm.ErrUnsupported,
// comm.ErrAborted, comm.ErrTimeout, comm.ErrExcluded,
// comm.ErrUnconfirmed): comm re-exports
// these very values, so that the internal packages comm hands its jobs
// to can wrap them and a program's errors.Is against comm's names still
// holds. The texts are
// part of every message that wraps them.
package sentinel

import "errors"

var (
	// Closed: the communicator was closed.
	Closed = errors.New("communicator closed")
	// Broken: an earlier collective failed part-way.
	Broken = errors.New("communicator broken by an earlier failure")
	// Unsupported: a type and operation, a transport or a setting this
	// job cannot have.
	Unsupported = errors.New("unsupported")
	// Aborted: Abort was called on this rank.
	Aborted = errors.New("communicator aborted")
	// Timeout: a call ran past its deadline.
	Timeout = errors.New("timed out")
	// Excluded: the others went on with an elastic communicator without
	// this rank.
	Excluded = errors.New("left out of the communicator the others went on with")
	// Unconfirmed: Close could not learn a peer's last call in time.
	Unconfirmed = errors.New("last call not confirmed")
)

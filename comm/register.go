package comm

import (
	"fmt"

	"github.com/gocoll/gocoll/transport"
)

// Registration is a buffer registered with a communicator's connections
// for zero-copy sends; see Register.
type Registration struct {
	deregister func() error // safe to call more than once (transport.Registrar)
}

// Register registers buf with c's connections for zero-copy sends, as
// NCCL's ncclCommRegister does. Over RDMA, collectives then send the
// parts of buf of at least 64 KiB (rdma.Options.ZeroCopyMin) straight
// from it, where they would otherwise first be copied into the
// transport's registered staging memory: the device reads the caller's
// memory, and each such send waits until it has. Over TCP and shared
// memory, which copy through the kernel or into the ring anyway, Register
// does nothing, so a program may register whatever the transport.
//
// Register the buffers a program uses again and again (gradients, a
// parameter buffer), once: registering costs a system call that pins
// every page. buf stays pinned, and allocated, until the Registration is
// closed; closing the job's communicator (sub-communicators share its
// connections) drops every registration left. The registered memory
// counts against RLIMIT_MEMLOCK.
func Register[T Element](c *Communicator, buf []T) (*Registration, error) {
	if c == nil {
		return nil, fmt.Errorf("comm: register: nil communicator: %w", ErrInvalid)
	}
	if len(buf) == 0 {
		return nil, fmt.Errorf("comm: register: empty buffer: %w", ErrInvalid)
	}
	if err := c.unusable(); err != nil {
		return nil, fmt.Errorf("comm: register: %w", err)
	}
	b := bytesOf(buf)
	d, err := transport.Register(c.t, b)
	if err != nil {
		return nil, fmt.Errorf("comm: register %d bytes: %w", len(b), err)
	}
	return &Registration{deregister: d}, nil
}

// Close deregisters the buffer, once no send reads from it any more. It
// is safe to call more than once, and after the communicator closed.
func (r *Registration) Close() error {
	if r == nil {
		return nil
	}
	return r.deregister()
}

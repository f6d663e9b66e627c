//go:build cgo && linux

package rdma

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/cgo"
	"slices"
	"sync"
	"unsafe"

	"github.com/gocoll/gocoll/transport"
)

// region is caller memory registered for zero-copy sends.
type region struct {
	lo, hi uintptr // [lo, hi) of the caller's slice
	mr     unsafe.Pointer
	lkey   uint32
	pin    runtime.Pinner
	// root keeps the region, and so its pins, reachable for as long as
	// the device holds the memory, even if the transport is dropped
	// without Close: a Pinner collected while it pins makes the runtime
	// panic, and memory the device holds must leak rather than be freed.
	root cgo.Handle
}

// registry is the regions of a transport. Sends look regions up under
// mu's read lock and hold it until the device has read their data, so
// that deregistering, which takes the write lock, waits for them.
type registry struct {
	mu   sync.RWMutex
	regs []*region // sorted by lo; under mu
}

// Register implements transport.Registrar: a send to any peer whose body
// lies inside p and is at least Options.ZeroCopyMin bytes long is written
// straight from p, and returns once the device has read it. The memory
// counts against RLIMIT_MEMLOCK, as the slabs do.
func (t *Transport) Register(p []byte) (deregister func() error, err error) {
	if len(p) == 0 {
		return nil, fmt.Errorf("rdma: register: empty buffer: %w", ErrInvalid)
	}
	select {
	case <-t.closed:
		return nil, fmt.Errorf("rdma: register: %w", transport.ErrClosed)
	default:
	}
	if t.h == nil {
		// A job of one rank sends nothing.
		return func() error { return nil }, nil
	}
	r := &region{lo: uintptr(unsafe.Pointer(&p[0]))}
	r.hi = r.lo + uintptr(len(p))
	// Go memory must neither move nor be freed, and its pages not be
	// returned to the system, while the device holds them.
	r.pin.Pin(&p[0])
	t.registry.mu.Lock()
	defer t.registry.mu.Unlock()
	if t.closing.Load() {
		r.pin.Unpin()
		return nil, fmt.Errorf("rdma: register: %w", transport.ErrClosed)
	}
	if r.mr, r.lkey, err = t.h.regSource(p); err != nil {
		r.pin.Unpin()
		return nil, fmt.Errorf("rdma: register %d bytes: %w", len(p), err)
	}
	r.root = cgo.NewHandle(r)
	i, _ := slices.BinarySearchFunc(t.registry.regs, r.lo, func(x *region, lo uintptr) int { return cmp.Compare(x.lo, lo) })
	t.registry.regs = slices.Insert(t.registry.regs, i, r)
	return func() error {
		t.deregister(r)
		return nil
	}, nil
}

// deregister drops r, once no send reads from it; a second call, or one
// after destroy dropped every region, finds it gone and does nothing.
func (t *Transport) deregister(r *region) {
	t.registry.mu.Lock()
	defer t.registry.mu.Unlock()
	if i := slices.Index(t.registry.regs, r); i >= 0 {
		t.registry.regs = slices.Delete(t.registry.regs, i, i+1)
		r.drop(t.h)
	}
}

// registered returns a region holding all of b, or nil; the caller holds
// the registry's read lock.
func (t *Transport) registered(b []byte) *region {
	lo := uintptr(unsafe.Pointer(&b[0]))
	hi := lo + uintptr(len(b))
	// Regions may overlap: look at every one starting at or below lo,
	// nearest first (there are few).
	i, _ := slices.BinarySearchFunc(t.registry.regs, lo+1, func(x *region, v uintptr) int { return cmp.Compare(x.lo, v) })
	for i--; i >= 0; i-- {
		if r := t.registry.regs[i]; r.hi >= hi {
			return r
		}
	}
	return nil
}

// dropRegions deregisters every region, at destroy: the queue pairs that
// could read them are gone.
func (t *Transport) dropRegions() {
	t.registry.mu.Lock()
	defer t.registry.mu.Unlock()
	for _, r := range t.registry.regs {
		r.drop(t.h)
	}
	t.registry.regs = nil
}

func (r *region) drop(h *hca) {
	h.deregMR(r.mr)
	r.pin.Unpin()
	r.root.Delete()
}

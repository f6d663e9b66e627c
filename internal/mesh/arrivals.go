package mesh

import (
	"sync"
	"sync/atomic"
)

// Arrivals hands the links made on any goroutine (a dial, an admission)
// to a progress engine that polls its own list of them (tcp, rdma): the
// engine takes the newcomers at its next pass. The zero value is ready.
type Arrivals[T any] struct {
	mu   sync.Mutex
	some atomic.Bool // list is not empty: the engine's pass asks without locking
	list []*T
}

// Add queues p for the engine. It never blocks for long: callers may
// hold their own locks.
func (a *Arrivals[T]) Add(p *T) {
	a.mu.Lock()
	a.list = append(a.list, p)
	a.some.Store(true)
	a.mu.Unlock()
}

// Take returns the links added since the last Take, nil if none.
func (a *Arrivals[T]) Take() []*T {
	if !a.some.Load() {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	list := a.list
	a.list = nil
	a.some.Store(false)
	return list
}

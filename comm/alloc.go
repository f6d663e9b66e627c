package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport/shm"
)

// Shared is memory from Alloc: a slice every rank of the communicator
// reads in place when its ranks share a host.
type Shared[T Element] struct {
	w    *window
	data []T
}

// Alloc allocates n elements, zeroed, as memory the ranks of c can read
// in place, as MPI_Win_allocate_shared and NCCL's window registration
// do; it is collective: every rank of c calls it, in the same order as
// its other collectives, with the same n and element type (a rank that
// passes another gets, like every rank, an error matching ErrMismatch).
//
// AllReduce of a buffer in that memory (all of it, or the same part of
// it on every rank) then skips the transport's copies: on ranks of one
// host joined by shared memory (Transport() is "shm"), rank r reads
// block r of every rank's buffer where it lies and reduces it into its
// own, and then copies every other block from the rank that reduced it,
// so each byte is read in place instead of being copied into a ring and
// out of it again (docs/traffic.md has the bytes moved), with the bits
// the ring algorithm's would have, on every rank. It takes three rounds
// of empty messages where the usual path takes one for a small buffer,
// so it runs from 1 MiB (the job's plan, the same on every rank:
// bench/results/onecopy-crossover.txt); a smaller buffer from Alloc
// takes the usual path, as fast and with the same bits as a buffer
// that is not (GOCOLL_DEBUG=info logs the choice). Float16 and
// BFloat16 Sum, Avg and Prod take it too, with the bits of the ring
// (GOCOLL_ALGO=allreduce=ring) under the job's GOCOLL_HALF_ACCUM; with
// the default float32 partial results, those are not the bits of the
// pairwise reduce-scatter a buffer of the heap takes for them on 3 to
// 8 ranks. ExactSum of floats takes the usual path, as
// does every allreduce when GOCOLL_ALGO forces an allreduce algorithm; so does
// every call on ranks of several hosts, over TCP or RDMA, or off Linux,
// where Alloc's memory is this rank's alone. Other collectives treat the
// memory as any other.
//
// The memory stays allocated until Free, or until c closes. A rank's
// window is a sealed memfd that its peers open through /proc/<pid>/fd,
// as the same user: nothing is named in /dev/shm, and nothing is left
// behind when a process dies.
func Alloc[T Element](ctx context.Context, c *Communicator, n int) (*Shared[T], error) {
	if c == nil {
		return nil, errNil("alloc")
	}
	w, err := c.alloc(ctx, n, dtypeOf[T](), int(unsafe.Sizeof(*new(T))))
	if err != nil {
		return nil, err
	}
	return &Shared[T]{w: w, data: unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(w.mem))), n)}, nil
}

// Slice is the memory, n elements; nil once freed.
func (s *Shared[T]) Slice() []T {
	if s == nil || s.w == nil || s.w.isFreed() {
		return nil
	}
	return s.data
}

// Free releases the memory on this rank, once the collectives using it
// are done. A slice of it kept past Free reads zeros and no peer sees
// what is written to it; AllReduce refuses it (ErrInvalid). For that,
// on Linux, the addresses stay reserved (no memory, one mapping of the
// process's) as long as the process runs: allocate the buffers a
// program reuses once, as with Register. Safe to call more than once,
// and after the communicator closed (which frees what is left).
func (s *Shared[T]) Free() error {
	if s == nil || s.w == nil {
		return nil
	}
	return s.w.free()
}

// window is one Alloc's memory on this rank: mem, this rank's buffer;
// views, when the ranks share it, every rank's buffer as this rank maps
// it (views[rank] is mem).
type window struct {
	id    uint32
	of    *windows
	mem   []byte
	own   *shm.Window // nil where the memory is the Go heap's
	views [][]byte
	rank  int
	at    [][]byte // scratch for the views of one call (calls run one at a time)
	// peers, for a buffer of the program's that Register made readable,
	// reads the other ranks' buffers; tag is what they check it by.
	registered bool
	peers      *peerReader
	tag        []byte
	// use is held, shared, by the calls reading the views, and by Free,
	// exclusively, so the memory is never unmapped under a call.
	use   sync.RWMutex
	freed atomic.Bool
}

func (w *window) isFreed() bool { return w.freed.Load() }

func (w *window) free() error {
	w.use.Lock()
	defer w.use.Unlock()
	if w.freed.Swap(true) {
		return nil
	}
	var errs []error
	for q, v := range w.views {
		if q != w.rank {
			errs = append(errs, shm.Unmap(v))
		}
	}
	w.views = nil
	if w.own != nil {
		errs = append(errs, w.own.Retire())
	} else {
		// Go's memory: the caller's slice keeps it valid, and the
		// collector may give the addresses to something else once it
		// is gone, so they are forgotten now.
		w.of.remove(w)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("comm: free %d bytes of shared memory: %w", len(w.mem), err)
	}
	return nil
}

// contains says where b starts in w's memory, if it lies in it.
func (w *window) contains(b []byte) (int, bool) {
	p, base := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(w.mem)))
	if len(b) == 0 || p < base || p-base >= uintptr(len(w.mem)) {
		return 0, false
	}
	return int(p - base), true
}

// place tells buffers at different places of the windows apart, in the
// call header (collectives.Group.SingleCopyAllReduce).
func (w *window) place(off int) uint32 {
	h := uint64(w.id)<<40 ^ uint64(off)
	h *= 0x9e3779b97f4a7c15
	return uint32(h >> 32)
}

// windows are a communicator's Alloc'd memory, freed or not: a freed
// window keeps its addresses (shm.Window.Retire), so a buffer in them is
// known to be freed.
type windows struct {
	count atomic.Int32 // len(list): the allreduce path skips the lookup when 0
	mu    sync.Mutex
	list  []*window
	next  uint32
}

func (ws *windows) add(w *window) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.list = append(ws.list, w)
	ws.count.Store(int32(len(ws.list)))
}

func (ws *windows) remove(w *window) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for i, x := range ws.list {
		if x == w {
			ws.list = append(ws.list[:i], ws.list[i+1:]...)
			break
		}
	}
	ws.count.Store(int32(len(ws.list)))
}

// find is the window b lies in, and where in it, or nil.
func (ws *windows) find(b []byte) (*window, int) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, w := range ws.list {
		if off, ok := w.contains(b); ok {
			return w, off
		}
	}
	return nil, 0
}

// overlaps says whether any byte of b lies in a window.
func (ws *windows) overlaps(b []byte) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	for _, w := range ws.list {
		base := uintptr(unsafe.Pointer(unsafe.SliceData(w.mem)))
		if p < base+uintptr(len(w.mem)) && base < p+uintptr(len(b)) {
			return true
		}
	}
	return false
}

// freeAll frees every window left, at Close.
func (ws *windows) freeAll() error {
	ws.mu.Lock()
	list := append([]*window(nil), ws.list...)
	ws.mu.Unlock()
	var errs []error
	for _, w := range list {
		errs = append(errs, w.free())
	}
	return errors.Join(errs...)
}

// freedError says why b may not be used, when it lies in memory from
// Alloc that was freed, or runs past the end of its memory.
func (c *Communicator) freedError(what string, b []byte) error {
	w, off := c.win.find(b)
	switch {
	case w == nil:
		return nil
	case w.registered:
		return nil // the program's memory, of any length
	case w.isFreed():
		return fmt.Errorf("comm: %s: the buffer lies in memory from Alloc that was freed: %w", what, ErrInvalid)
	case off+len(b) > len(w.mem):
		return fmt.Errorf("comm: %s: the buffer of %d bytes at byte %d of memory from Alloc runs %d bytes past its end: %w",
			what, len(b), off, off+len(b)-len(w.mem), ErrInvalid)
	}
	return nil
}

// groupAllReduce is the allreduce of b, through
// collectives.Group.SingleCopyAllReduce when b lies in memory from Alloc
// that the ranks share, whose algorithm table takes the single copy for
// the sizes, types and ops it fits (and says why, or why not); otherwise
// the group's.
func (c *Communicator) groupAllReduce(ctx context.Context, b []byte, dt reduce.DType, op reduce.Op) error {
	if c.win.count.Load() != 0 {
		if w, off := c.win.find(b); w != nil {
			w.use.RLock()
			defer w.use.RUnlock()
			if w.isFreed() {
				return fmt.Errorf("comm: allreduce: the buffer's memory from Alloc was freed during the call: %w", ErrInvalid)
			}
			if w.views != nil && off+len(b) <= len(w.mem) {
				for q, v := range w.views {
					w.at[q] = v[off : off+len(b)]
				}
				return c.g.SingleCopyAllReduce(ctx, w.at, dt, op, w.place(off))
			}
			if w.peers != nil && off+len(b) <= w.peers.shortest {
				w.peers.base = off
				return c.g.SingleCopyAllReduceRead(ctx, b, w.peers, dt, op, w.place(off))
			}
		}
	}
	return c.g.AllReduce(ctx, b, dt, op)
}

// allocRecord is what each rank tells the others at Alloc: the element
// count and type it asked for, whether it offers its memory for sharing,
// and where to find it (shm.WindowRef).
const allocRecord = 8 + 1 + 1 + 4 + 4 + 32

func (c *Communicator) alloc(ctx context.Context, n int, dt reduce.DType, es int) (*window, error) {
	if err := c.unusable(); err != nil {
		return nil, fmt.Errorf("comm: alloc: %w", err)
	}
	size, rank := 0, c.Rank()
	if n > 0 && n <= math.MaxInt/es {
		size = n * es
	}
	w := &window{rank: rank, of: &c.win}
	// The memory is made before anything is said, so that a rank that
	// cannot have it says so. A memfd where there are memfds, shared or
	// not (its addresses outlive Free: see shm.Window.Retire).
	offer, why := false, ""
	if size > 0 {
		if own, err := shm.NewWindow(size); err == nil {
			w.own, w.mem = own, own.Bytes()
			why = c.sharedWhy()
			offer = why == ""
		} else {
			why = err.Error()
			w.mem = make([]byte, size)
		}
	}
	drop := func() { // nothing was handed out: no addresses to keep
		if w.own != nil {
			w.own.Drop()
		}
	}
	var rec [allocRecord]byte
	binary.LittleEndian.PutUint64(rec[0:], uint64(int64(n)))
	rec[8] = byte(dt)
	if offer {
		rec[9] = 1
		ref := w.own.Ref()
		binary.LittleEndian.PutUint32(rec[10:], uint32(ref.PID))
		binary.LittleEndian.PutUint32(rec[14:], uint32(ref.FD))
		copy(rec[18:], ref.Tag)
	}
	all := make([]byte, allocRecord*c.Size())
	if err := AllGather(ctx, c, rec[:], all); err != nil {
		drop()
		return nil, err
	}
	recs := make([][]byte, c.Size())
	for q := range recs {
		recs[q] = all[q*allocRecord : (q+1)*allocRecord]
	}
	if err := allocAgree(recs, es); err != nil {
		drop()
		return nil, err
	}
	shared := c.Size() > 1
	for _, r := range recs {
		shared = shared && r[9] == 1
	}
	if shared {
		if err := c.mapPeers(ctx, w, recs, size); err != nil {
			drop()
			return nil, err
		}
		if w.views == nil {
			why = "some rank could not map another's memory (see GOCOLL_DEBUG=debug)"
		}
	} else if why == "" {
		why = "some rank's memory cannot be shared"
	}
	c.log.Info("alloc", "bytes", size, "single_copy", w.views != nil, "why", why)
	if w.own != nil {
		w.own.Seal() // every peer has mapped it, or will not
	}
	c.win.mu.Lock()
	w.id = c.win.next
	c.win.next++
	c.win.mu.Unlock()
	c.win.add(w)
	return w, nil
}

// sharedWhy says why the ranks cannot read each other's memory, or
// nothing where they may.
func (c *Communicator) sharedWhy() string {
	switch tname := c.rootOrSelf().tname; {
	case c.Size() == 1:
		return "one rank"
	case tname != "shm":
		return "the transport is " + tname + ", not shm (ranks on several hosts, or forced)"
	}
	return ""
}

// allocAgree checks that every rank asked for the same number of
// elements of the same type, as every rank sees alike.
func allocAgree(recs [][]byte, es int) error {
	n0, dt0 := int64(binary.LittleEndian.Uint64(recs[0])), reduce.DType(recs[0][8])
	for q, r := range recs[1:] {
		n, dt := int64(binary.LittleEndian.Uint64(r)), reduce.DType(r[8])
		if n != n0 || dt != dt0 {
			return fmt.Errorf("comm: alloc: rank 0 asked for %d x %v, rank %d for %d x %v: %w", n0, dt0, q+1, n, dt, ErrMismatch)
		}
	}
	if n0 <= 0 || n0 > math.MaxInt/int64(es) {
		return fmt.Errorf("comm: alloc: %d elements: %w", n0, ErrInvalid)
	}
	return nil
}

// mapPeers maps every peer's window and agrees with the ranks whether
// all could: if one could not (another host, another pid namespace), no
// rank reads the others' memory, and the allreduce takes the usual path.
func (c *Communicator) mapPeers(ctx context.Context, w *window, recs [][]byte, size int) error {
	views := make([][]byte, len(recs))
	ok := int32(1)
	for q, r := range recs {
		if q == w.rank {
			views[q] = w.mem
			continue
		}
		ref := shm.WindowRef{PID: int(binary.LittleEndian.Uint32(r[10:])), FD: int(binary.LittleEndian.Uint32(r[14:])), Tag: string(r[18:50])}
		v, err := shm.OpenWindow(ref, size)
		if err != nil {
			c.log.Debug("alloc: cannot map a peer's memory; allreduce of it takes the usual path", "peer", q, "err", err)
			ok = 0
			break
		}
		views[q] = v
	}
	unmap := func() {
		for q, v := range views {
			if q != w.rank && v != nil {
				shm.Unmap(v)
			}
		}
	}
	all := []int32{ok}
	if err := AllReduce(ctx, c, all, Min); err != nil {
		unmap()
		return err
	}
	if all[0] == 0 {
		unmap()
		return nil
	}
	w.views, w.at = views, make([][]byte, len(views))
	return nil
}

package shm

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Ring header layout. Each counter and flag has 128 bytes to itself: the
// adjacent-line prefetcher of x86 cores pulls cache lines in pairs, so 64
// bytes apart is not far enough to keep the sender's and the receiver's
// writes from invalidating each other.
const (
	offTail    = 0   // uint64, messages published; written by the sender
	offHead    = 128 // uint64, messages released; written by the receiver
	offRxSleep = 256 // uint32, the receiver is (about to be) parked on tail
	offTxSleep = 384 // uint32, the sender is (about to be) parked on head
	offMagic   = 448 // uint64, set by the creator
	offLens    = 512 // [Slots]uint32, payload length per slot; sender writes
	pageSize   = 4096
	ringMagic  = 0x314d4853 // "SHM1"
)

func headerBytes(slots int) int {
	return (offLens + 4*slots + pageSize - 1) &^ (pageSize - 1)
}

func ringBytes(slots, slotSize int) int {
	return headerBytes(slots) + slots*slotSize
}

// ring is one mapping of a pair's shared ring.
type ring struct {
	mem      []byte
	tail     *atomic.Uint64
	head     *atomic.Uint64
	rxSleep  *atomic.Uint32
	txSleep  *atomic.Uint32
	lens     []uint32
	slab     []byte
	slots    uint64
	slotSize int
}

func newRing(mem []byte, slots, slotSize int) *ring {
	h := headerBytes(slots)
	return &ring{
		mem:      mem,
		tail:     (*atomic.Uint64)(unsafe.Pointer(&mem[offTail])),
		head:     (*atomic.Uint64)(unsafe.Pointer(&mem[offHead])),
		rxSleep:  (*atomic.Uint32)(unsafe.Pointer(&mem[offRxSleep])),
		txSleep:  (*atomic.Uint32)(unsafe.Pointer(&mem[offTxSleep])),
		lens:     unsafe.Slice((*uint32)(unsafe.Pointer(&mem[offLens])), slots),
		slab:     mem[h : h+slots*slotSize],
		slots:    uint64(slots),
		slotSize: slotSize,
	}
}

func (r *ring) magic() *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&r.mem[offMagic]))
}

// slot is the memory of slot i.
func (r *ring) slot(i uint64) []byte {
	off := int(i) * r.slotSize
	return r.slab[off : off+r.slotSize : off+r.slotSize]
}

// createRing makes a sealed memfd of the ring's size, maps it and marks
// it. The caller passes fd to the sender and closes it.
func createRing(slots, slotSize int) (fd int, r *ring, err error) {
	size := ringBytes(slots, slotSize)
	fd, err = unix.MemfdCreate("gocoll-shm", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("shm: memfd_create: %w", err)
	}
	fail := func(what string, err error) (int, *ring, error) {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("shm: %s: %w", what, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail("size the ring", err)
	}
	// Sealed, a peer cannot shrink the file under our mapping, which would
	// turn our next access into SIGBUS.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fail("seal the ring", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("map the ring", err)
	}
	r = newRing(mem, slots, slotSize)
	r.magic().Store(ringMagic)
	return fd, r, nil
}

// openRing maps a ring a peer created, after checking it is what the peer
// claims: the right size, sealed against shrinking, and initialised.
func openRing(fd, slots, slotSize int) (*ring, error) {
	size := ringBytes(slots, slotSize)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shm: stat the peer's ring: %w", err)
	}
	if st.Size != int64(size) {
		return nil, fmt.Errorf("shm: the peer's ring has %d bytes, want %d: %w", st.Size, size, errProtocol)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("shm: the peer's ring is not sealed against shrinking: %w", errProtocol)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: map the peer's ring: %w", err)
	}
	r := newRing(mem, slots, slotSize)
	if r.magic().Load() != ringMagic {
		unix.Munmap(mem)
		return nil, fmt.Errorf("shm: the peer's ring is not initialised: %w", errProtocol)
	}
	return r, nil
}

func (r *ring) unmap() {
	if r != nil && r.mem != nil {
		unix.Munmap(r.mem)
		r.mem = nil
	}
}

// The futex word of a counter is its low half (little-endian): it changes
// with every increment, and a wrap of exactly 2^32 messages between a check
// and the wait cannot happen.
func word(c *atomic.Uint64) *uint32 { return (*uint32)(unsafe.Pointer(c)) }

const (
	futexWait = 0 // FUTEX_WAIT, shared (the word is in memory shared between processes)
	futexWake = 1 // FUTEX_WAKE, shared
)

// park blocks until *addr != val, a wake, or d passes.
func park(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// wake wakes every thread parked on addr, in any process.
func wake(addr *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake, uintptr(math.MaxInt32), 0, 0, 0)
}

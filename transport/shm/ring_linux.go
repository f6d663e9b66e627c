package shm

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Ring layout. A header page holds the counters and flags, each with 128
// bytes to itself: the adjacent-line prefetcher of x86 cores pulls cache
// lines in pairs, so 64 bytes apart is not far enough to keep the sender's
// and the receiver's writes from invalidating each other. Then come the
// slots, each behind a 128-byte slot header holding its sequence number
// and length. The sender publishes a message by storing the sequence
// number last; the receiver polls that word, which is also its futex word.
// A small message travels inline, right behind the 8-byte sequence and
// length words, so that up to 56 bytes (a 24-byte allreduce's payload
// behind its call header, on the job's communicator) share one line with
// the word the receiver polls: the line that brings the news brings the
// data. With a 64-bit sequence word in front of the length, the payload
// started at byte 16 and the 8 bytes of data fell into the next line,
// which the receiver then waited for on its first load of them. A
// message of up to inlineMax bytes starts there too and runs on from the
// header into the slot's body, so that it spans as few lines as its size
// allows: started at the body, a 300-byte one (about a 256-byte allreduce's)
// took six lines where five hold it, and each line is a transfer between
// the two cores.
//
// A larger message starts lead bytes before the end of the slot header,
// lead being its head's length mod 64 (see SendParts), so that the body
// behind the head starts on the 128-byte boundary at the header's end:
// the receiver reduces out of it, and the sender copies into it, at full
// speed only from and to 64-byte-aligned addresses. The sender records
// lead in the slot header, beside the length, once the body is in: the
// line the receiver polls is stored to only when the message is ready.
const (
	offHead    = 0   // uint64, messages released; written by the receiver
	offRxSleep = 128 // uint32, the receiver is (about to be) parked on a slot
	offTxSleep = 256 // uint32, the sender is (about to be) parked on head
	offMagic   = 384 // uint64, set by the creator
	offStores  = 512 // uint32, the stores the receiver asks for (nontemporal.go)
	pageSize   = 4096
	ringMagic  = 0x354d4853 // "SHM5": the layout's version

	slotHdr    = 128 // bytes before each slot's payload
	offSeq     = 0   // uint32 in the slot header: message number + 1, mod 2^32
	offLen     = 4   // uint32 in the slot header: payload length
	offInline  = 8   // payloads of up to inlineMax bytes start here
	offLead    = 8   // uint32 in the slot header of a larger message: its lead
	offMark    = 12  // uint32 in the slot header of a larger message: how it was written (nontemporal.go)
	offCopyNS  = 16  // uint32 in the slot header of a larger message: the sender's copy time, if timed
	inlineMax  = 512 - offInline
	slotsStart = pageSize
)

func ringBytes(slots, slotSize int) int {
	return slotsStart + slots*slotStride(slotSize)
}

// slotStride is the distance between slots: a whole number of 128-byte
// line pairs, so that every slot header is one pair.
func slotStride(slotSize int) int { return (slotHdr + slotSize + 127) &^ 127 }

// ring is one mapping of a pair's shared ring.
type ring struct {
	mem      []byte
	head     *atomic.Uint64
	rxSleep  *atomic.Uint32
	txSleep  *atomic.Uint32
	slots    uint64
	slotSize int
	// mask is slots-1 when slots is a power of two (the default), which
	// turns the slot of a message number from a division, on every
	// message's path, into an AND.
	mask uint64
}

// slot is the slot message number seq lands in.
func (r *ring) slot(seq uint64) uint64 {
	if r.mask != 0 {
		return seq & r.mask
	}
	return seq % r.slots
}

func newRing(mem []byte, slots, slotSize int) *ring {
	var mask uint64
	if slots&(slots-1) == 0 {
		mask = uint64(slots - 1)
	}
	return &ring{
		mask:     mask,
		mem:      mem,
		head:     (*atomic.Uint64)(unsafe.Pointer(&mem[offHead])),
		rxSleep:  (*atomic.Uint32)(unsafe.Pointer(&mem[offRxSleep])),
		txSleep:  (*atomic.Uint32)(unsafe.Pointer(&mem[offTxSleep])),
		slots:    uint64(slots),
		slotSize: slotSize,
	}
}

func (r *ring) magic() *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&r.mem[offMagic]))
}

func (r *ring) base(i uint64) int { return slotsStart + int(i)*slotStride(r.slotSize) }

// seq is slot i's sequence word: the low 32 bits of the number of the
// message it holds, plus one. Message numbers a lap apart differ in it as
// long as a ring has fewer than 2^32 slots.
func (r *ring) seq(i uint64) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&r.mem[r.base(i)+offSeq]))
}

func (r *ring) len(i uint64) *uint32 {
	return (*uint32)(unsafe.Pointer(&r.mem[r.base(i)+offLen]))
}

// lead is slot i's lead word, which a message of more than inlineMax
// bytes sets.
func (r *ring) lead(i uint64) *uint32 {
	return (*uint32)(unsafe.Pointer(&r.mem[r.base(i)+offLead]))
}

// mark and copyNS are slot i's words saying how a message of more than
// inlineMax bytes was written and, if the sender timed it, how long its
// copy took.
func (r *ring) mark(i uint64) *uint32 {
	return (*uint32)(unsafe.Pointer(&r.mem[r.base(i)+offMark]))
}

func (r *ring) copyNS(i uint64) *uint32 {
	return (*uint32)(unsafe.Pointer(&r.mem[r.base(i)+offCopyNS]))
}

// stores is the ring's word in which the receiver asks for the stores a
// long message is written with (nontemporal.go).
func (r *ring) stores() *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&r.mem[offStores]))
}

// place is where an n-byte message whose head has headLen bytes goes in
// slot i, and, for a message past the inline limit, its lead, which the
// sender records once the message is in (see put).
func (r *ring) place(i uint64, n, headLen int) ([]byte, uint32) {
	off, lead := r.base(i)+offInline, 0
	if n > inlineMax {
		lead = headLen & 63
		off = r.base(i) + slotHdr - lead
	}
	return r.mem[off : off+n : off+n], uint32(lead)
}

// firstLine is how many bytes of an inline message share the line of the
// sequence word.
const firstLine = 64 - offInline

// fillTailFirst copies head then body into dst, an inline message's place,
// writing what lies past the sequence word's line before what lies in it.
// Written front to back, a message of two lines or more took that line
// from the receiver's poll with its first bytes, lost it to the next poll
// while the rest went into the following lines, and had to take it back
// for the sequence word: a third transfer between the cores for every
// such message. (The second line's own transfer remains, and with it
// most of the step from 24 to 28 bytes of an allreduce.) Stores
// become visible in program order on amd64 (and the sequence word's store
// is a release everywhere), so the order here costs nothing in safety: the
// receiver reads nothing before it sees the sequence word.
func fillTailFirst(dst, head, body []byte) {
	if len(dst) <= firstLine {
		copy(dst[copy(dst, head):], body)
		return
	}
	if h := len(head); h <= firstLine {
		copy(dst[firstLine:], body[firstLine-h:])
		copy(dst[copy(dst[:firstLine], head):firstLine], body)
	} else {
		copy(dst[h:], body)
		copy(dst[firstLine:h], head[firstLine:])
		copy(dst[:firstLine], head)
	}
}

// placed is where the n-byte message in slot i lies, or false if its lead
// is out of range: the sender broke the protocol.
func (r *ring) placed(i uint64, n int) ([]byte, bool) {
	off := r.base(i) + offInline
	if n > inlineMax {
		lead := *r.lead(i)
		if lead >= 64 {
			return nil, false
		}
		off = r.base(i) + slotHdr - int(lead)
	}
	return r.mem[off : off+n : off+n], true
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

// low is the futex word of a 64-bit counter, its low half (little-endian):
// it changes with every increment, and a wrap of exactly 2^32 messages
// between a check and the wait cannot happen.
func low(c *atomic.Uint64) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(c)) }

const (
	futexWait = 0 // FUTEX_WAIT, shared (the word is in memory shared between processes)
	futexWake = 1 // FUTEX_WAKE, shared
)

// park blocks until *addr != val, a wake, or d passes.
func park(addr *atomic.Uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// wake wakes every thread parked on addr, in any process.
func wake(addr *atomic.Uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake, uintptr(math.MaxInt32), 0, 0, 0)
}

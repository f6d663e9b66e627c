//go:build linux

package shm

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Window is memory a rank creates for the ranks of its host to map and
// read in place (comm.Alloc): a memfd sealed at its size, like a ring, so
// that no peer can shrink it under another's mapping. It is named in no
// file system either: a peer opens it through the creator's descriptor
// table, /proc/<pid>/fd/<fd>, which the kernel lets only a process that
// could read the creator's memory anyway (the same user, ptrace's read
// check) open. The memfd's own name carries a random tag, which the peer
// checks, so a descriptor number that now means something else in a
// process of that pid is never mapped. The creator keeps the descriptor
// open until its peers have mapped the window (Seal); the memory then
// lives as long as some process maps it.
type Window struct {
	mem []byte
	fd  int
	tag string
}

// WindowRef is what a peer needs to map a Window: where the creator
// keeps its descriptor and the tag the memfd is named by.
type WindowRef struct {
	PID, FD int
	Tag     string
}

const windowPrefix = "gocoll-win-"

// NewWindow creates a window of size bytes, zeroed, and maps it.
func NewWindow(size int) (*Window, error) {
	if size <= 0 {
		return nil, fmt.Errorf("shm: window of %d bytes", size)
	}
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("shm: window tag: %w", err)
	}
	tag := hex.EncodeToString(nonce[:])
	fd, err := unix.MemfdCreate(windowPrefix+tag, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shm: window: memfd_create: %w", err)
	}
	fail := func(what string, err error) (*Window, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: window of %d bytes: %s: %w", size, what, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail("size", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fail("seal", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("map", err)
	}
	return &Window{mem: mem, fd: fd, tag: tag}, nil
}

// Bytes is the creator's mapping of the window.
func (w *Window) Bytes() []byte { return w.mem }

// Ref is what the peers pass to OpenWindow.
func (w *Window) Ref() WindowRef { return WindowRef{PID: os.Getpid(), FD: w.fd, Tag: w.tag} }

// Seal closes the creator's descriptor, once every peer that is to map
// the window has: from then on nobody can open it, and the memory goes
// when the last mapping does. Safe to call more than once.
func (w *Window) Seal() {
	if w.fd >= 0 {
		unix.Close(w.fd)
		w.fd = -1
	}
}

// OpenWindow maps the window of size bytes that ref names, after checking
// it is that window: the memfd tagged ref.Tag, of the size, sealed against
// shrinking. A peer in another pid namespace, or on another host, fails
// here, and its caller falls back to copying.
func OpenWindow(ref WindowRef, size int) ([]byte, error) {
	if len(ref.Tag) != 32 || ref.PID <= 0 || ref.FD < 0 {
		return nil, fmt.Errorf("shm: window reference %+v: %w", ref, errProtocol)
	}
	if _, err := hex.DecodeString(ref.Tag); err != nil {
		return nil, fmt.Errorf("shm: window tag %q: %w", ref.Tag, errProtocol)
	}
	path := "/proc/" + strconv.Itoa(ref.PID) + "/fd/" + strconv.Itoa(ref.FD)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("shm: open the window of process %d: %w", ref.PID, err)
	}
	defer unix.Close(fd)
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if want := "/memfd:" + windowPrefix + ref.Tag + " (deleted)"; err != nil || link != want {
		return nil, fmt.Errorf("shm: descriptor %d of process %d is %q, not the window %s: %w", ref.FD, ref.PID, link, ref.Tag, errProtocol)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shm: stat the window: %w", err)
	}
	if st.Size != int64(size) {
		return nil, fmt.Errorf("shm: the window of process %d has %d bytes, want %d: %w", ref.PID, st.Size, size, errProtocol)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("shm: the window of process %d is not sealed against shrinking: %w", ref.PID, errProtocol)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: map the window of process %d: %w", ref.PID, err)
	}
	return mem, nil
}

// Unmap drops a peer's window that OpenWindow mapped.
func Unmap(mem []byte) error {
	if len(mem) == 0 {
		return nil
	}
	return unix.Munmap(mem)
}

// Drop unmaps the window, for a creator that never handed it out.
func (w *Window) Drop() error {
	w.Seal()
	if w.mem == nil {
		return nil
	}
	err := unix.Munmap(w.mem)
	w.mem = nil
	return err
}

// Retire drops the creator's mapping of the window but keeps its
// addresses: they become private zero pages, so a slice of the window a
// program kept after freeing it reads zeros and writes reach no peer,
// rather than faulting, and no later mapping can take those addresses
// (a freed buffer stays recognisable as freed). The pages cost memory
// only where written again.
func (w *Window) Retire() error {
	w.Seal()
	if w.mem == nil {
		return nil
	}
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(unsafe.SliceData(w.mem)), uintptr(len(w.mem)), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE)
	if err != nil {
		return fmt.Errorf("shm: retire the window: %w", err)
	}
	return nil
}

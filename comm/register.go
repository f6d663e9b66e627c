package comm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"github.com/gocoll/gocoll/internal/cma"
	"github.com/gocoll/gocoll/transport"
)

// Registration is a buffer registered with a communicator; see Register.
type Registration struct {
	w          *window
	deregister func() error // the transport's (transport.Registrar); safe to call more than once
}

// Register registers buf, an ordinary slice of the program's, with c, as
// NCCL's ncclCommRegister and MPI_Win_create do. It is collective: every
// rank of c calls it, in the same order as its other collectives, each
// with a buffer of its own (of any length and type: a rank whose buffer
// is empty, or overlaps memory it registered or allocated with Alloc
// before, makes every rank's Register fail with ErrInvalid, naming it).
//
// On ranks of one host joined by shared memory (Transport() is "shm"),
// the ranks then read each other's registered buffers with the kernel's
// cross-memory attach (process_vm_readv), and AllReduce of a registered
// buffer (all of it, or the same part of it on every rank, within the
// shortest rank's buffer) on 2 ranks takes the single-copy path, from
// the same 1 MiB floor and for the same types and ops as memory from
// Alloc: rank r reads block r of every rank's buffer, a piece at a time
// into a scratch piece that stays in cache, reduces it into its own,
// and then reads every other block from the rank that reduced it. That
// is one copy where the usual path makes two through the ring
// (docs/traffic.md); the result has the ring algorithm's bits. But the
// kernel's copy costs several times a memcpy a byte, and on 4 ranks it
// measured slower than the usual path, so on more than 2 ranks (the
// job's plan) the usual path runs (bench/results/register-ab.txt).
// Alloc's memory, which the ranks map, saves that copy and is faster
// at every rank count.
//
// The kernel allows the reads as it allows ptrace: the same user and a
// dumpable process (or CAP_SYS_PTRACE), and, under the Yama module's
// ptrace_scope 1, a process that allowed them (Register lets every
// process of the user read this one's memory there:
// prctl(PR_SET_PTRACER_ANY); docs/security.md). Register tries every
// read once, and if some rank cannot read another (refused, another pid
// namespace, not Linux), every rank's allreduce of the buffer takes the
// usual path: the ranks decide it together, once, and GOCOLL_DEBUG=info
// logs why. So does every allreduce of a buffer registered on ranks of
// several hosts, over TCP or RDMA.
//
// Over RDMA, collectives also send the parts of buf of at least 64 KiB
// (rdma.Options.ZeroCopyMin) straight from it, where they would otherwise
// first be copied into the transport's registered staging memory: the
// device reads the caller's memory, and each such send waits until it
// has. Registering there pins every page, which counts against
// RLIMIT_MEMLOCK.
//
// Register the buffers a program uses again and again (gradients, a
// parameter buffer), once. The Registration keeps buf alive; buf must
// stay where it is (a slice of the Go heap does), and must not be
// written by another goroutine while a collective on it runs. Close
// ends the registration on this rank; closing the job's communicator
// ends every one left.
func Register[T Element](ctx context.Context, c *Communicator, buf []T) (*Registration, error) {
	if c == nil {
		return nil, errNil("register")
	}
	return c.register(ctx, bytesOf(buf))
}

// Close ends the registration on this rank, once the collectives on the
// buffer are done; an allreduce of it after that, on any rank, takes the
// usual path, or fails with ErrMismatch while other ranks still have it
// registered. It is safe to call more than once, and after the
// communicator closed.
func (r *Registration) Close() error {
	if r == nil {
		return nil
	}
	var errs []error
	if r.w != nil {
		errs = append(errs, r.w.free())
	}
	if r.deregister != nil {
		errs = append(errs, r.deregister())
	}
	return errors.Join(errs...)
}

// What each rank tells the others at Register (regRecord bytes): whether
// its buffer can be registered (regOK, or why not), whether it offers it
// for reading, and where: its pid, the buffer's address and length, and
// a tag of 16 random bytes at tagAddr, which a peer reads to check that
// the pid is this process's in its own pid namespace too.
const regRecord = 1 + 1 + 4 + 8 + 8 + 8 + 16

const (
	regOK = iota
	regEmpty
	regOverlap
	regFailed
)

func (c *Communicator) register(ctx context.Context, b []byte) (*Registration, error) {
	if err := c.unusable(); err != nil {
		return nil, fmt.Errorf("comm: register: %w", err)
	}
	reg := &Registration{}
	w := &window{rank: c.Rank(), of: &c.win, mem: b, registered: true}
	state, why := byte(regOK), c.sharedWhy()
	var terr error
	switch {
	case len(b) == 0:
		state = regEmpty
	case c.win.overlaps(b):
		state = regOverlap
	default:
		if reg.deregister, terr = transport.Register(c.t, b); terr != nil {
			state = regFailed
		}
	}
	offer := state == regOK && why == ""
	if offer {
		did, err := cma.AllowReaders()
		c.log.Debug("register: letting peers read this process", "did", did, "err", err)
		if err != nil {
			offer, why = false, err.Error()
		}
	}
	w.tag = make([]byte, 16)
	rand.Read(w.tag)
	var rec [regRecord]byte
	rec[0] = state
	if offer {
		rec[1] = 1
		binary.LittleEndian.PutUint32(rec[2:], uint32(os.Getpid()))
		binary.LittleEndian.PutUint64(rec[6:], uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))))
		binary.LittleEndian.PutUint64(rec[14:], uint64(len(b)))
		binary.LittleEndian.PutUint64(rec[22:], uint64(uintptr(unsafe.Pointer(unsafe.SliceData(w.tag)))))
		copy(rec[30:], w.tag)
	}
	fail := func(err error) (*Registration, error) {
		if reg.deregister != nil {
			reg.deregister()
		}
		return nil, err
	}
	all := make([]byte, regRecord*c.Size())
	if err := AllGather(ctx, c, rec[:], all); err != nil {
		return fail(err)
	}
	recs := make([][]byte, c.Size())
	for q := range recs {
		recs[q] = all[q*regRecord : (q+1)*regRecord]
	}
	if err := registerAgree(recs, c.Rank(), terr); err != nil {
		return fail(err)
	}
	shared := c.Size() > 1
	for _, r := range recs {
		shared = shared && r[1] == 1
	}
	if shared {
		var err error
		if why, err = c.readPeers(ctx, w, recs); err != nil {
			return fail(err)
		}
	} else if why == "" {
		why = "some rank cannot offer its buffer (see its log)"
	}
	c.log.Info("register", "bytes", len(b), "single_copy", w.peers != nil, "why", why)
	c.win.mu.Lock()
	w.id = c.win.next
	c.win.next++
	c.win.mu.Unlock()
	c.win.add(w)
	reg.w = w
	return reg, nil
}

// registerAgree fails every rank alike when some rank's buffer cannot be
// registered; the rank whose transport refused it returns that error.
func registerAgree(recs [][]byte, rank int, terr error) error {
	for q, r := range recs {
		switch r[0] {
		case regEmpty:
			return fmt.Errorf("comm: register: rank %d's buffer is empty: %w", q, ErrInvalid)
		case regOverlap:
			return fmt.Errorf("comm: register: rank %d's buffer overlaps memory it registered or allocated before: %w", q, ErrInvalid)
		case regFailed:
			if q == rank {
				return fmt.Errorf("comm: register: %w", terr)
			}
			return fmt.Errorf("comm: register: rank %d's transport could not register its buffer (see its error): %w", q, ErrInvalid)
		}
	}
	return nil
}

// readPeers reads every peer's tag once and agrees with the ranks
// whether all could: if one could not, no rank reads the others'
// buffers, and the allreduce takes the usual path. It says why not.
func (c *Communicator) readPeers(ctx context.Context, w *window, recs [][]byte) (string, error) {
	p := &peerReader{pid: make([]int, len(recs)), addr: make([]uintptr, len(recs)), shortest: len(w.mem)}
	got := [2]int32{0, -1} // errno of the first failed read (-1: another process's tag), and whose
	var tag [16]byte
	for q, r := range recs {
		p.pid[q] = int(binary.LittleEndian.Uint32(r[2:]))
		p.addr[q] = uintptr(binary.LittleEndian.Uint64(r[6:]))
		p.shortest = min(p.shortest, int(binary.LittleEndian.Uint64(r[14:])))
		if q == w.rank || got[0] != 0 {
			continue
		}
		err := cma.Read(p.pid[q], uintptr(binary.LittleEndian.Uint64(r[22:])), tag[:])
		var errno syscall.Errno
		switch {
		case errors.As(err, &errno):
			got = [2]int32{int32(errno), int32(q)}
		case err != nil:
			got = [2]int32{int32(syscall.EIO), int32(q)}
		case string(tag[:]) != string(r[30:46]):
			got = [2]int32{-1, int32(q)}
		}
		if err != nil {
			c.log.Debug("register: cannot read a peer's memory", "peer", q, "err", err)
		}
	}
	all := make([]int32, 2*len(recs))
	if err := AllGather(ctx, c, got[:], all); err != nil {
		return "", err
	}
	for q := range recs {
		switch errno, peer := all[2*q], all[2*q+1]; {
		case errno == -1:
			return fmt.Sprintf("rank %d read another process than rank %d at its pid (pid namespaces differ)", q, peer), nil
		case errno != 0:
			return fmt.Sprintf("rank %d cannot read rank %d's memory (process_vm_readv: %v)", q, peer, syscall.Errno(errno)), nil
		}
	}
	w.peers = p
	return "every rank reads the others' buffers (process_vm_readv)", nil
}

// peerReader reads the ranks' registered buffers: rank q's lies at
// addr[q] in process pid[q]. base is where the running allreduce's
// buffer starts in them (calls on a communicator run one at a time);
// shortest is the shortest rank's length.
type peerReader struct {
	pid            []int
	addr           []uintptr
	base, shortest int
}

// ReadPeer is collectives.PeerReader's.
func (p *peerReader) ReadPeer(q, off int, dst []byte) error {
	return cma.Read(p.pid[q], p.addr[q]+uintptr(p.base+off), dst)
}

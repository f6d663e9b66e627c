package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gocoll/gocoll/internal/logging"
	"github.com/gocoll/gocoll/internal/mesh"
	"github.com/gocoll/gocoll/transport"
)

// DefaultSilentPeer is how long a silent peer host is waited for by
// default: well above any pause of a loaded but live network.
const DefaultSilentPeer = 30 * time.Second

const (
	frameData   = 1
	frameCredit = 2
	frameBye    = 3
	// frameAbort carries, as text, why the sender is about to reset its
	// connections, so that the receiver can name the real culprit.
	frameAbort  = 4
	frameHdrLen = 12
	// maxAbortText bounds an abort frame's payload, which the receiver
	// must hold whole in its read-ahead buffer.
	maxAbortText = 512

	// smallSend is the payload size below which header and payload are
	// copied into one buffer and written with one write: cheaper than
	// writev's bookkeeping for tiny messages.
	smallSend = 4 << 10
)

var (
	errProtocol = mesh.ErrProtocol

	// ErrUnsupported is wrapped by Connect's error on systems where the
	// mesh cannot run: the engine drives raw non-blocking sockets with
	// poll(2), which it does on Linux and the other Unix systems but not
	// on Windows, where only a job of one rank (no peers) connects.
	ErrUnsupported = errors.New("tcp: transport not supported on this system")
)

// Connect joins the job as rank of size: it listens, publishes its
// address in store, and returns. Links to the peers are made as calls need
// them, which needs store until Close; with Options.Eager, every link is
// made before Connect returns, as a job-wide check that every rank can
// reach every other.
func Connect(ctx context.Context, store transport.Store, rank, size int, token []byte, opts Options) (*Transport, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	if opts.Spare < 0 || opts.Spare > maxSpare {
		return nil, fmt.Errorf("tcp: Spare %d, want 0..%d", opts.Spare, maxSpare)
	}
	if opts.Spare > 0 && opts.Eager {
		return nil, fmt.Errorf("tcp: Spare ranks join after Connect, and Eager shuts the listener once the mesh is built: %w", errors.ErrUnsupported)
	}
	if size < 1 || rank < 0 || rank >= size+opts.Spare {
		return nil, fmt.Errorf("tcp: rank %d of size %d (and %d spare)", rank, size, opts.Spare)
	}
	for _, r := range opts.Warm {
		if r < 0 || r >= size+opts.Spare {
			return nil, fmt.Errorf("tcp: Warm names rank %d, outside a job of %d", r, size)
		}
	}
	if opts.Encrypt && len(token) == 0 {
		return nil, fmt.Errorf("tcp: GOCOLL_ENCRYPT=1 derives its keys from the links' token and this rank has none (a job without GRUN_TOKEN gets one from its rendezvous store, which a job of one rank does not run): set GRUN_TOKEN, or leave GOCOLL_ENCRYPT unset: %w", ErrNoToken)
	}
	t := newTransport(rank, size, opts)
	if size == 1 && opts.Spare == 0 {
		return t, nil
	}
	if errNoEngine != nil {
		return nil, errNoEngine
	}
	if err := t.start(); err != nil {
		t.Close()
		return nil, err
	}
	if err := t.connect(ctx, store, token); err != nil {
		t.Close()
		return nil, err
	}
	logging.L().Debug("tcp transport connected", "rank", rank, "size", size, "eager", opts.Eager, "warm", len(opts.Warm),
		"slots", opts.Slots, "slot_size", opts.SlotSize, "encrypt", opts.Encrypt)
	return t, nil
}

// hello is what each end of a mesh connection says after authenticating:
// what every transport's hello says (mesh.Hello), then tcp's own flags
// and salt.
type hello struct {
	mesh.Hello
	flags uint32        // helloEncrypt
	salt  [saltLen]byte // random, fresh for each connection: keys a sealed link
}

// maxSpare bounds Options.Spare: each spare rank costs a pointer here
// and a little state in the layers above.
const maxSpare = 1 << 12

// Capacity is how many job ranks may hold links here: the job's size
// and Options.Spare ranks past it.
func (t *Transport) Capacity() int { return t.size + t.opts.Spare }

// helloMagic opens a hello. The accepting end answers the hellos with a
// verdict byte (links.go), which the all-at-once mesh of before had no
// use for: its "MESH" is refused, so that ranks of the two versions
// cannot half-connect. "MSH2", before hellos carried flags and a salt, is
// refused too.
const helloMagic = "MSH3"

// helloLayout puts the namespace's hash at 20, the flags at 28 and the
// salt at 32.
var helloLayout = mesh.HelloLayout{Magic: helloMagic, Len: helloLen, NamespaceAt: 20, What: "mesh"}

const helloLen = 32 + saltLen

func (h hello) marshal() []byte {
	b := helloLayout.Marshal(h.Hello)
	binary.LittleEndian.PutUint32(b[28:], h.flags)
	copy(b[32:], h.salt[:])
	return b
}

func parseHello(b []byte) (hello, error) {
	mh, err := helloLayout.Parse(b)
	if err != nil {
		return hello{}, err
	}
	return hello{mh, binary.LittleEndian.Uint32(b[28:]), [saltLen]byte(b[32:])}, nil
}

// hello is what this rank says to a peer; salt is the connection's
// random part.
func (t *Transport) hello(salt [saltLen]byte) hello {
	var flags uint32
	if t.opts.Encrypt {
		flags |= helloEncrypt
	}
	return hello{mesh.NewHello(t.rank, t.size, t.opts.LinkOptions), flags, salt}
}

func onOff(flags uint32) string {
	if flags&helloEncrypt != 0 {
		return "GOCOLL_ENCRYPT=1"
	}
	return "no encryption"
}

// check validates a peer's hello against ours. want is the expected rank,
// or -1 when any other rank may be calling.
func (t *Transport) check(h hello, want int) error {
	mine := t.hello([saltLen]byte{})
	if err := h.Check(mine.Hello, want, t.Capacity()); err != nil {
		return err
	}
	if h.flags&helloEncrypt != mine.flags&helloEncrypt {
		return fmt.Errorf("rank %d runs with %s, rank %d with %s: set GOCOLL_ENCRYPT the same on every rank: %w",
			h.Rank, onOff(h.flags), t.rank, onOff(mine.flags), ErrEncryptMismatch)
	}
	return nil
}

func (t *Transport) key(r int) string {
	return t.opts.Namespace + "tcp/addr/" + strconv.Itoa(r)
}

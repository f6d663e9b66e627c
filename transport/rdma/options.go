package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"time"

	"github.com/gocoll/gocoll/internal/mesh"
	"github.com/gocoll/gocoll/transport"
)

// Options tune the mesh. The zero value picks the defaults: 4 slots of
// 512 KiB per peer (2..128 slots, at most 16 MiB each), queue pairs made
// on demand; HandshakeTimeout bounds one exchange of queue pair numbers.
// A waiting call busy-polls the completion queue for Spin before it
// sleeps on the completion channel. Every rank of a job must use the same
// Slots and SlotSize (each exchange of queue pair numbers checks).
type Options struct {
	transport.LinkOptions
	// Device is the verbs device to use, e.g. "mlx5_0" or "rxe0" (comm
	// reads GOCOLL_IB_DEV). Empty: the first device with an active port.
	Device string
	// Port is the device port (1-based). 0: the first active one.
	Port int
	// GIDIndex is the GID table entry used as source address on RoCE
	// (comm reads GOCOLL_IB_GID_INDEX). Index 0 is the IPv6 link-local
	// GID, which needs no IP configuration; routed RoCEv2 needs the index
	// of an IPv4 or global IPv6 entry (see show_gids). Ignored on
	// InfiniBand, where the LID is used.
	GIDIndex int
	// Timeout is the local ACK timeout exponent of every queue pair: a
	// request unacknowledged for 4.096 µs × 2^Timeout is retransmitted
	// (default 14, about 67 ms; 1..31). Together with RetryCount it bounds
	// how long a dead peer goes unnoticed by a sender:
	// (RetryCount+1) × 4.096 µs × 2^Timeout, under 0.5 s by default.
	// Large fabrics under congestion may want 18-20.
	Timeout int
	// RetryCount is how often an unacknowledged request is retransmitted
	// before the queue pair fails with IBV_WC_RETRY_EXC_ERR (default 6;
	// -1 for none). Not 7, the most the field holds: Soft-RoCE (rdma_rxe)
	// takes 7 to mean "retry forever", and a dead peer would then never
	// be noticed.
	RetryCount int
	// RNRRetry is how often a send refused for lack of a posted receive is
	// retried (default 7, which means forever; the credit protocol keeps
	// receives posted, so this only matters for a stalled peer).
	RNRRetry int
	// MaxInline is the largest message written inline in the work request,
	// saving the NIC a DMA read (default 256 bytes, lowered to what the
	// device grants; negative: never inline).
	MaxInline int
	// ZeroCopyMin is the smallest message body sent zero-copy, straight
	// from memory registered with Transport.Register, rather than through
	// a staging slot (default DefaultZeroCopyMin; negative: never). Such
	// a send waits until the device has read the body; below this size
	// the copy costs less than that wait.
	ZeroCopyMin int
	// ProbeInterval is how often a waiting call checks that silent peers
	// are alive, with an empty RDMA write: receiving alone never notices
	// a dead sender (default 1 s).
	ProbeInterval time.Duration
	// CloseLinger bounds how long Close waits for peers to say goodbye.
	CloseLinger time.Duration
	// ListenHost is the address the connection manager listens on for
	// peers exchanging queue pair numbers. Default: the local address of
	// this rank's connection to the store, as for tcp.
	ListenHost string
}

const (
	DefaultSlots = 4
	// DefaultZeroCopyMin is Options.ZeroCopyMin's default.
	DefaultZeroCopyMin = 64 << 10
	DefaultSlotSize    = 512 << 10
	// MaxSlotSize is what the 25-bit length of the immediate can carry.
	MaxSlotSize = 16 << 20
	maxSlots    = 128

	DefaultTimeout    = 14
	DefaultRetryCount = 6
	DefaultRNRRetry   = 7
	defaultInline     = 256
)

func (o *Options) fill() error {
	rings := mesh.Rings{Slots: DefaultSlots, MaxSlots: maxSlots, SlotSize: DefaultSlotSize, MaxSlotSize: MaxSlotSize}
	if err := rings.Fill("rdma", &o.LinkOptions, true); err != nil {
		return fmt.Errorf("%w: %w", err, ErrInvalid)
	}
	if o.Port < 0 || o.Port > 255 {
		return fmt.Errorf("rdma: port %d: %w", o.Port, ErrInvalid)
	}
	if o.GIDIndex < 0 || o.GIDIndex > 255 {
		return fmt.Errorf("rdma: GID index %d, want 0..255: %w", o.GIDIndex, ErrInvalid)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Timeout < 1 || o.Timeout > 31 {
		return fmt.Errorf("rdma: ACK timeout exponent %d, want 1..31: %w", o.Timeout, ErrInvalid)
	}
	switch {
	case o.RetryCount == 0:
		o.RetryCount = DefaultRetryCount
	case o.RetryCount < 0:
		o.RetryCount = 0
	}
	if o.RetryCount > 7 {
		return fmt.Errorf("rdma: retry count %d, want 0..7: %w", o.RetryCount, ErrInvalid)
	}
	if o.RNRRetry == 0 {
		o.RNRRetry = DefaultRNRRetry
	}
	if o.RNRRetry < 0 || o.RNRRetry > 7 {
		return fmt.Errorf("rdma: RNR retry %d, want 0..7: %w", o.RNRRetry, ErrInvalid)
	}
	if o.MaxInline == 0 {
		o.MaxInline = defaultInline
	}
	if o.MaxInline < 0 {
		o.MaxInline = 0
	}
	switch {
	case o.ZeroCopyMin == 0:
		o.ZeroCopyMin = DefaultZeroCopyMin
	case o.ZeroCopyMin < 0:
		o.ZeroCopyMin = math.MaxInt
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = time.Second
	}
	if o.CloseLinger <= 0 {
		o.CloseLinger = 2 * time.Second
	}
	return nil
}

var (
	// ErrUnavailable is wrapped by every error that means "RDMA cannot be
	// used on this machine", as opposed to a fault of a working mesh; a
	// caller choosing a transport falls back to TCP on it.
	ErrUnavailable = errors.New("rdma unavailable")
	// ErrNoCgo: the program was built with CGO_ENABLED=0.
	ErrNoCgo = fmt.Errorf("%w: built without cgo", ErrUnavailable)
	// ErrNoLibrary: libibverbs.so.1 could not be loaded.
	ErrNoLibrary = fmt.Errorf("%w: cannot load libibverbs.so.1", ErrUnavailable)
	// ErrNoDevice: the library found no RDMA device.
	ErrNoDevice = fmt.Errorf("%w: no RDMA device", ErrUnavailable)
	// ErrDeviceNotFound: the device named by Options.Device does not exist.
	ErrDeviceNotFound = fmt.Errorf("%w: no such RDMA device", ErrUnavailable)
	// ErrPortNotActive: the device has no active port (cable, subnet
	// manager, or the netdev under a RoCE device is down).
	ErrPortNotActive = fmt.Errorf("%w: port not active", ErrUnavailable)
	// ErrBadGID: the GID index names an empty GID table entry.
	ErrBadGID = fmt.Errorf("%w: unusable GID", ErrUnavailable)
	// ErrMemlock: RLIMIT_MEMLOCK is too low to register the slabs.
	ErrMemlock = fmt.Errorf("%w: locked-memory limit too low", ErrUnavailable)
	// ErrRegister: memory registration failed.
	ErrRegister = errors.New("rdma: memory registration failed")
	// ErrVerbs: a verbs call failed while building the mesh.
	ErrVerbs = errors.New("rdma: verbs call failed")
	// ErrInvalid: bad options or arguments.
	ErrInvalid = errors.New("rdma: invalid argument")
	// ErrMismatch: the peers disagree about the mesh (options, job).
	ErrMismatch = errors.New("rdma: peers disagree")

	errProtocol = errors.New("protocol violation")
)

// The 32-bit immediate of a data write says how many bytes it wrote, in
// the low 25 bits, and in the top 7 returns credits to the peer: slots of
// the peer's that this rank has released since it last said so, up to
// maxPiggyback. Slots fill in order, so the receiver knows which one a
// write filled without being told. A rank that sends to a peer as often as
// it receives from it (every exchange of a collective) so never spends a
// separate message on credits.
const (
	immLenBits    = 25
	immCreditBits = 7
	immLenMask    = 1<<immLenBits - 1
	maxPiggyback  = 1<<immCreditBits - 1
)

func encodeData(credits, n int) uint32 { return uint32(credits)<<immLenBits | uint32(n) }

func decodeData(imm uint32) (credits, n int) {
	return int(imm >> immLenBits), int(imm & immLenMask)
}

// Control messages are SENDs with immediate and no payload, told apart
// from data by their completion opcode: kind in the top 2 bits, an
// argument (the credit count) below.
const (
	ctlCredit = 1
	ctlBye    = 2
	ctlAbort  = 3
	ctlArgMax = 1<<30 - 1
)

func encodeCtl(kind, arg int) uint32 { return uint32(kind)<<30 | uint32(arg) }

func decodeCtl(imm uint32) (kind, arg int) { return int(imm >> 30), int(imm & ctlArgMax) }

// Work request ids carry what the request was and for which peer, so a
// completion, even a failed one (which carries nothing else), is traced to
// its peer: kind in the top byte, peer rank below, a sequence number in
// the low 40 bits.
const (
	wrRecv  = 1
	wrSend  = 2
	seqBits = 40
	seqMask = 1<<seqBits - 1
)

func wrID(kind, rank int, seq uint64) uint64 {
	return uint64(kind)<<56 | uint64(rank)<<seqBits | seq&seqMask
}

func splitWRID(id uint64) (kind, rank int, seq uint64) {
	return int(id >> 56), int(id >> seqBits & 0xffff), id & seqMask
}

// credits is a sender's account of the slots it may fill at one peer.
// It lives under the peer's locks; it is separate so the arithmetic can
// be tested on its own.
type credits struct {
	avail, slots int
}

// grant adds n credits returned by the receiver; more than were lent is a
// protocol violation.
func (c *credits) grant(n int) error {
	if n <= 0 || c.avail+n > c.slots {
		return fmt.Errorf("%d credits returned with %d of %d outstanding: %w", n, c.slots-c.avail, c.slots, errProtocol)
	}
	c.avail += n
	return nil
}

// take spends one credit, reporting whether there was one.
func (c *credits) take() bool {
	if c.avail == 0 {
		return false
	}
	c.avail--
	return true
}

// creditBatch is how many released slots are returned in one control
// message: half the slots, so the sender never runs dry waiting for a
// batch to fill; a waiting engine returns the rest before it sleeps.
func creditBatch(slots int) int { return max(1, slots/2) }

// Work completion status names and meanings, from the ibv_wc_status enum
// of <infiniband/verbs.h> and ibv_poll_cq(3).
var wcStatusNames = [...]string{
	"IBV_WC_SUCCESS", "IBV_WC_LOC_LEN_ERR", "IBV_WC_LOC_QP_OP_ERR", "IBV_WC_LOC_EEC_OP_ERR",
	"IBV_WC_LOC_PROT_ERR", "IBV_WC_WR_FLUSH_ERR", "IBV_WC_MW_BIND_ERR", "IBV_WC_BAD_RESP_ERR",
	"IBV_WC_LOC_ACCESS_ERR", "IBV_WC_REM_INV_REQ_ERR", "IBV_WC_REM_ACCESS_ERR", "IBV_WC_REM_OP_ERR",
	"IBV_WC_RETRY_EXC_ERR", "IBV_WC_RNR_RETRY_EXC_ERR", "IBV_WC_LOC_RDD_VIOL_ERR",
	"IBV_WC_REM_INV_RD_REQ_ERR", "IBV_WC_REM_ABORT_ERR", "IBV_WC_INV_EECN_ERR",
	"IBV_WC_INV_EEC_STATE_ERR", "IBV_WC_FATAL_ERR", "IBV_WC_RESP_TIMEOUT_ERR", "IBV_WC_GENERAL_ERR",
	"IBV_WC_TM_ERR", "IBV_WC_TM_RNDV_INCOMPLETE",
}

const (
	wcSuccess     = 0
	wcFlushErr    = 5
	wcRemAccess   = 10
	wcRetryExc    = 12
	wcRNRRetryExc = 13
)

// WCStatusName names an ibv_wc_status value.
func WCStatusName(status int) string {
	if status >= 0 && status < len(wcStatusNames) {
		return wcStatusNames[status]
	}
	return fmt.Sprintf("ibv_wc_status(%d)", status)
}

var wcHints = map[int]string{
	1:             "local length error (message larger than the buffer)",
	2:             "local queue pair operation error",
	4:             "local protection error (bad lkey or unregistered memory)",
	wcFlushErr:    "queue pair already in error state: an earlier request failed",
	7:             "bad response from the peer",
	8:             "local access error",
	9:             "peer rejected the request as invalid",
	wcRemAccess:   "peer refused the write (its memory is gone: peer closed or died?)",
	11:            "peer could not execute the request",
	wcRetryExc:    "peer unreachable or dead: no acknowledgement after every retry",
	wcRNRRetryExc: "peer posted no receive in time (stalled peer)",
	16:            "peer aborted the request",
	19:            "fatal device error",
	20:            "response timeout",
	21:            "general device error",
}

// WCError is a failed work completion. It wraps transport.ErrPeerLost: a
// queue pair in error state can carry nothing more, so the peer behind it
// is lost to this rank.
type WCError struct {
	Status    int    // ibv_wc_status
	VendorErr uint32 // provider-specific detail
	Op        string // what the work request was doing
}

func (e *WCError) Error() string {
	s := fmt.Sprintf("%s failed: %s", e.Op, WCStatusName(e.Status))
	if h, ok := wcHints[e.Status]; ok {
		s += " (" + h + ")"
	}
	if e.VendorErr != 0 {
		s += fmt.Sprintf(", vendor error 0x%x", e.VendorErr)
	}
	return s
}

func (e *WCError) Unwrap() error { return transport.ErrPeerLost }

// memlockError says whether registering need bytes would exceed the
// locked-memory limit, and how to raise it. Processes with CAP_IPC_LOCK
// (root, usually) are not bound by it.
func memlockError(need, limit uint64, unlimited, capIPCLock bool) error {
	if unlimited || capIPCLock || need <= limit {
		return nil
	}
	return fmt.Errorf("%w: RLIMIT_MEMLOCK is %d KiB but the receive and send slabs need %d KiB; "+
		"raise it with `ulimit -l unlimited` (or a memlock line in /etc/security/limits.conf, "+
		"LimitMEMLOCK=infinity for systemd units, --ulimit memlock=-1 for docker), "+
		"or use fewer or smaller slots", ErrMemlock, limit>>10, (need+1023)>>10)
}

// info is what a rank tells a peer when they connect (see links.go): its
// port's address and the queue pair and receive slab meant for that peer.
type info struct {
	rank, size, slots, slotSize uint32
	namespace                   uint64
	lid                         uint16
	mtu, linkLayer              uint8
	gid                         [16]byte
	qp                          peerInfo
}

type peerInfo struct {
	qpn, psn uint32
	addr     uint64
	rkey     uint32
}

const (
	infoMagic   = "GCR2"
	infoHdrLen  = 4 + 4*4 + 8 + 2 + 1 + 1 + 16
	peerInfoLen = 4 + 4 + 8 + 4
	infoLen     = infoHdrLen + peerInfoLen
)

func nsHash(ns string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(ns))
	return h.Sum64()
}

func (in *info) marshal() []byte {
	b := make([]byte, infoLen)
	copy(b, infoMagic)
	le := binary.LittleEndian
	le.PutUint32(b[4:], in.rank)
	le.PutUint32(b[8:], in.size)
	le.PutUint32(b[12:], in.slots)
	le.PutUint32(b[16:], in.slotSize)
	le.PutUint64(b[20:], in.namespace)
	le.PutUint16(b[28:], in.lid)
	b[30] = in.mtu
	b[31] = in.linkLayer
	copy(b[32:48], in.gid[:])
	o := infoHdrLen
	le.PutUint32(b[o:], in.qp.qpn)
	le.PutUint32(b[o+4:], in.qp.psn)
	le.PutUint64(b[o+8:], in.qp.addr)
	le.PutUint32(b[o+16:], in.qp.rkey)
	return b
}

func parseInfo(b []byte) (*info, error) {
	if len(b) != infoLen || string(b[:4]) != infoMagic {
		return nil, fmt.Errorf("malformed queue pair record of %d bytes: %w", len(b), errProtocol)
	}
	le := binary.LittleEndian
	in := &info{
		rank: le.Uint32(b[4:]), size: le.Uint32(b[8:]), slots: le.Uint32(b[12:]), slotSize: le.Uint32(b[16:]),
		namespace: le.Uint64(b[20:]), lid: le.Uint16(b[28:]), mtu: b[30], linkLayer: b[31],
	}
	copy(in.gid[:], b[32:48])
	o := infoHdrLen
	in.qp = peerInfo{qpn: le.Uint32(b[o:]), psn: le.Uint32(b[o+4:]), addr: le.Uint64(b[o+8:]), rkey: le.Uint32(b[o+16:])}
	return in, nil
}

// check validates a peer's record against this rank's. want is the rank
// expected, or -1 when any other rank of the job may be calling.
func (in *info) check(mine *info, want int) error {
	switch {
	case in.namespace != mine.namespace:
		return fmt.Errorf("record belongs to another communicator: %w", ErrMismatch)
	case want >= 0 && int(in.rank) != want:
		return fmt.Errorf("expected rank %d, the peer says it is rank %d: %w", want, in.rank, ErrMismatch)
	case want < 0 && (in.rank == mine.rank || in.rank >= mine.size):
		return fmt.Errorf("rank %d may not connect to rank %d of %d: %w", in.rank, mine.rank, mine.size, ErrMismatch)
	case in.size != mine.size:
		return fmt.Errorf("rank %d says the job has %d ranks, this rank says %d: %w", in.rank, in.size, mine.size, ErrMismatch)
	case in.slots != mine.slots || in.slotSize != mine.slotSize:
		return fmt.Errorf("rank %d uses %d slots of %d bytes, this rank %d of %d (every rank must use the same transport options): %w",
			in.rank, in.slots, in.slotSize, mine.slots, mine.slotSize, ErrMismatch)
	case in.linkLayer != mine.linkLayer:
		return fmt.Errorf("rank %d is on link layer %d, this rank on %d: %w", in.rank, in.linkLayer, mine.linkLayer, ErrMismatch)
	}
	return nil
}

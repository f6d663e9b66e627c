//go:build cgo && linux

package rdma

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gocoll/gocoll/internal/logging"
	"github.com/gocoll/gocoll/internal/mesh"
	"github.com/gocoll/gocoll/internal/safetext"
	"github.com/gocoll/gocoll/transport"
)

// pollSliceMs bounds one sleep on the completion channel, so that
// cancellation, Close and the liveness probes are never far away.
const pollSliceMs = 20

// Transport is the RDMA mesh of one rank. See package transport for the
// contract and the package doc for the design.
type Transport struct {
	rank, size int
	opts       Options
	h          *hca
	// peers holds, by rank, the peers this rank has made a queue pair
	// with (links.go); nil for the others and at our own rank.
	peers []atomic.Pointer[peer]
	// list is the peers the progress engine looks after: those of peers
	// adopted so far (see adopt), under progress.
	list []*peer

	sqDepth, rqDepth int
	sigEvery         uint64
	// wakefd is the eventfd that interrupts a sleeping engine. wakeMu
	// keeps wake, which a cancelled context's AfterFunc may run at any
	// time, from writing to it while destroy closes it: the number could
	// by then name another file of the process.
	wakeMu sync.Mutex
	wakefd int

	// progress is held by the one goroutine driving the CQ.
	progress  chan struct{}
	wcs       []wc      // under progress
	lastProbe time.Time // under progress
	closing   atomic.Bool
	closed    chan struct{}
	closeOnce sync.Once

	// held counts the messages queued for or handed out to callers and
	// not yet released: each is a view into a receive slab, so a slab is
	// unmapped only once none is held (unmapSlab), or a caller still
	// copying out of a message when Abort runs would read unmapped
	// memory. slabMu orders destroy's unmapping with the last Release.
	held     atomic.Int64
	slabMu   sync.Mutex
	deferred [][]byte // slabs left for the last Release to unmap

	loss *mesh.Loss // the peers lost, first noticed first

	links    // the connection manager (links.go)
	registry // caller memory for zero-copy sends
}

type peer struct {
	t          *Transport
	rank       int
	qp         unsafe.Pointer
	qpn, psn   uint32
	inline     int
	sges       int // gather elements per send request: 2 allow zero-copy sends
	remoteAddr uint64
	remoteRKey uint32
	slab       []byte // our receive slots for this peer
	stage      []byte // our send staging slots for this peer
	joined     []byte // a head and body joined for an inline write, under smu
	// The slabs' mappings and registrations, released by destroy.
	slabMem, stageMem []byte
	slabMR, stageMR   unsafe.Pointer
	rkey, sendLKey    uint32

	// Bringing the queue pair up (links.go). cm serializes the exchanges
	// that may reach this peer at once (our dial, its dial, a retry);
	// rtr and remote are under it. up closes once this rank knows that
	// both ends' queue pairs receive: only then may it write.
	cm     sync.Mutex
	rtr    bool
	remote peerInfo
	upOnce sync.Once
	up     chan struct{}
	// linking is set while a goroutine of linkLater's brings the queue
	// pair up.
	linking atomic.Bool

	// Inbound, under t.progress.
	recvSeq  int
	repost   int
	ended    bool // the peer said goodbye
	flushed  bool // a flushed completion was seen in this pass
	broken   bool // a completion failed
	ready    chan transport.Message
	recvNote chan struct{}

	// Outbound.
	sendSeq  int // data writes posted, under smu
	cmu      sync.Mutex
	cr       credits // under cmu
	sendNote chan struct{}
	smu      sync.Mutex // one poster of the send queue at a time
	wrSeq    uint64     // send requests posted, under smu
	lastSig  uint64     // last signalled request, under smu
	stageWR  []uint64   // request that last read each staging slot, under smu
	byeSeq   uint64     // under smu
	gone     bool       // queue pair destroyed, under smu
	sqDone   atomic.Uint64
	pending  atomic.Int32 // slots released here, not yet returned
	// creditMsgs counts credit returns sent on their own, not with data
	// (under smu); tests look at it.
	creditMsgs int
	// zeroCopies counts sends written straight from registered memory
	// (under smu); tests look at it.
	zeroCopies int

	mesh.Fault // how the link failed, once
}

// Probe says whether RDMA is usable here with these options: which device
// and port Connect would use, or why there is none (an error wrapping
// ErrUnavailable). It registers no memory and creates no queue pair.
func Probe(opts Options) (string, error) {
	if err := opts.fill(); err != nil {
		return "", err
	}
	h, err := openHCA(opts)
	if err != nil {
		return "", fmt.Errorf("rdma: %w", err)
	}
	defer h.close()
	return h.name + " port " + strconv.Itoa(h.port), nil
}

// Connect joins the job as rank of size: it opens the device, publishes
// the address of its connection manager in store, and returns. A queue
// pair to a peer is made the first time a call needs that peer (see
// links.go), which needs store until Close; with Options.Eager, every queue
// pair is up before Connect returns. token authenticates the exchanges
// of queue pair numbers between ranks.
func Connect(ctx context.Context, store transport.Store, rank, size int, token []byte, opts Options) (*Transport, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	if size < 1 || rank < 0 || rank >= size || size > 1<<16 {
		return nil, fmt.Errorf("rdma: rank %d of size %d: %w", rank, size, ErrInvalid)
	}
	t := &Transport{
		rank:     rank,
		size:     size,
		opts:     opts,
		peers:    make([]atomic.Pointer[peer], size),
		progress: make(chan struct{}, 1),
		closed:   make(chan struct{}),
		loss:     mesh.NewLoss(0),
		wakefd:   -1,
		wcs:      make([]wc, maxPollBatch),
	}
	if size == 1 {
		return t, nil
	}
	if store == nil {
		return nil, fmt.Errorf("rdma: a job of %d ranks needs a rendezvous store: %w", size, ErrInvalid)
	}
	if err := t.connect(ctx, store, token); err != nil {
		t.Abort(err)
		return nil, fmt.Errorf("rdma: rank %d: %w", rank, err)
	}
	logging.L().Debug("rdma transport connected", "rank", rank, "size", size, "device", t.h.name, "port", t.h.port,
		"slots", opts.Slots, "slot_size", opts.SlotSize, "eager", opts.Eager, "queue_pairs", t.queuePairs())
	return t, nil
}

// lockLimit reports RLIMIT_MEMLOCK and whether this process may exceed it.
func lockLimit() (limit uint64, unlimited, capIPCLock bool) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		return 0, true, false // cannot tell: let registration decide
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) == nil {
		capIPCLock = data[unix.CAP_IPC_LOCK/32].Effective&(1<<(unix.CAP_IPC_LOCK%32)) != 0
	}
	return rl.Cur, rl.Cur == unix.RLIM_INFINITY, capIPCLock
}

// mmapSlab maps n bytes off the Go heap: the NIC writes into it behind the
// garbage collector's back, and it must never move. Huge pages are tried
// first (fewer translation entries for the NIC); DONTFORK keeps a child
// process from sharing, and breaking, the registered pages.
func mmapSlab(n int) ([]byte, error) {
	const huge = 2 << 20
	if n < huge {
		// A small slab (few, small slots) would waste most of a huge
		// page, for every peer.
		size := (n + unix.Getpagesize() - 1) &^ (unix.Getpagesize() - 1)
		mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, fmt.Errorf("mmap of %d bytes: %w", size, err)
		}
		unix.Madvise(mem, unix.MADV_DONTFORK)
		return mem, nil
	}
	size := (n + huge - 1) &^ (huge - 1)
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_HUGETLB)
	if err != nil {
		mem, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, fmt.Errorf("mmap of %d bytes: %w", size, err)
		}
		unix.Madvise(mem, unix.MADV_HUGEPAGE)
	}
	unix.Madvise(mem, unix.MADV_DONTFORK)
	return mem, nil
}

func (t *Transport) key(kind string, r int) string {
	return t.opts.Namespace + "rdma/" + kind + "/" + strconv.Itoa(r)
}

// connect opens the device and sets up what every queue pair shares: the
// completion queue, its channel and the engine's eventfd; then it starts
// the connection manager (links.go).
func (t *Transport) connect(ctx context.Context, store transport.Store, token []byte) error {
	o := t.opts
	h, err := openHCA(o)
	if err != nil {
		return err
	}
	t.h = h
	npeers := t.size - 1
	// A lazy rank registers one peer's slabs at a time; an eager one all
	// of them at once. Either way a limit too low for what it will need
	// first fails here, with the advice, rather than in the first call.
	first := 1
	if o.Eager {
		first = npeers
	}
	if err := t.memlockCheck(first); err != nil {
		return err
	}
	// Per direction at most Slots data writes, Slots credit messages and
	// a goodbye are outstanding (see the package doc), plus room for
	// probes.
	t.sqDepth = 2*o.Slots + 8
	t.rqDepth = 2*o.Slots + 4
	t.sigEvery = uint64(max(1, t.sqDepth/4))
	if t.sqDepth > h.maxQPWR {
		return fmt.Errorf("%w: %d slots need %d work requests per queue pair, %s allows %d", ErrInvalid, o.Slots, t.sqDepth, h.name, h.maxQPWR)
	}
	// The one completion queue must hold every completion of every queue
	// pair that can ever exist here, since nothing can grow it in place;
	// where the device caps it below that, this rank can link to as many
	// peers as fit (maxPeers), and a link past that fails.
	per := t.sqDepth + t.rqDepth
	cqe := npeers*per + 16
	if h.maxCQE > 0 && cqe > h.maxCQE {
		cqe = h.maxCQE
	}
	t.maxPeers = min(npeers, (cqe-16)/per)
	if t.maxPeers < 1 || o.Eager && t.maxPeers < npeers {
		return fmt.Errorf("%w: %d ranks with %d slots need a completion queue of %d entries, %s allows %d",
			ErrInvalid, t.size, o.Slots, npeers*per+16, h.name, h.maxCQE)
	}
	if err := h.setup(cqe); err != nil {
		return err
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	t.wakefd = fd
	return t.startLinks(ctx, store, token)
}

// memlockCheck says whether n peers' slabs fit under RLIMIT_MEMLOCK.
func (t *Transport) memlockCheck(n int) error {
	need := uint64(2 * n * t.opts.Slots * t.opts.SlotSize)
	lim, unl, capOK := lockLimit()
	return memlockError(need, lim, unl, capOK)
}

// destroy releases everything, whatever state connect reached. The
// connection manager has stopped (see stopLinks): no queue pair is being
// made or brought up.
func (t *Transport) destroy() {
	t.makeMu.Lock()
	defer t.makeMu.Unlock()
	for r := range t.peers {
		p := t.peers[r].Load()
		if p == nil {
			continue
		}
		p.smu.Lock()
		p.gone = true
		p.smu.Unlock()
		// Messages nobody took will not be released.
		for len(p.ready) > 0 {
			select {
			case <-p.ready:
				t.held.Add(-1)
			default:
			}
		}
		p.release()
	}
	if t.h != nil {
		t.dropRegions()
		t.h.close()
	}
	t.wakeMu.Lock()
	if t.wakefd >= 0 {
		unix.Close(t.wakefd)
		t.wakefd = -1
	}
	t.wakeMu.Unlock()
}

// release destroys p's queue pair and its slabs, whatever of them exist.
func (p *peer) release() {
	h := p.t.h
	if p.qp != nil {
		h.destroyQP(p.qp)
		p.qp = nil
	}
	h.deregMR(p.slabMR)
	h.deregMR(p.stageMR)
	p.slabMR, p.stageMR = nil, nil
	if p.slabMem != nil {
		p.t.unmapSlab(p.slabMem)
		p.slabMem = nil
	}
	if p.stageMem != nil {
		unix.Munmap(p.stageMem)
		p.stageMem = nil
	}
}

// unmapSlab unmaps a receive slab, or leaves it to the last Release while
// callers hold messages (see held).
func (t *Transport) unmapSlab(m []byte) {
	t.slabMu.Lock()
	defer t.slabMu.Unlock()
	if t.held.Load() > 0 {
		t.deferred = append(t.deferred, m)
		return
	}
	unix.Munmap(m)
}

// unhold counts a message released, and unmaps the slabs destroy left
// once none is held.
func (t *Transport) unhold() {
	if t.held.Add(-1) > 0 {
		return
	}
	t.slabMu.Lock()
	defer t.slabMu.Unlock()
	if t.held.Load() == 0 {
		for _, m := range t.deferred {
			unix.Munmap(m)
		}
		t.deferred = nil
	}
}

// Rank implements transport.Transport.
func (t *Transport) Rank() int { return t.rank }

// Size implements transport.Transport.
func (t *Transport) Size() int { return t.size }

// MaxMessage implements transport.Transport.
func (t *Transport) MaxMessage() int { return t.opts.SlotSize }

// Device names the device and port in use ("" for a job of one rank).
func (t *Transport) Device() string {
	if t.h == nil {
		return ""
	}
	return t.h.name + " port " + strconv.Itoa(t.h.port)
}

// peer returns peer r once its queue pair is up (or it failed), making
// the queue pair first if there is none yet (see link).
func (t *Transport) peer(ctx context.Context, r int, op string) (*peer, error) {
	if r < 0 || r >= t.size || r == t.rank {
		return nil, fmt.Errorf("rdma: %s: rank %d is not a peer of rank %d in a job of %d: %w", op, r, t.rank, t.size, ErrInvalid)
	}
	select {
	case <-t.closed:
		return nil, &transport.PeerError{Peer: r, Op: op, Err: transport.ErrClosed}
	default:
	}
	if p := t.peers[r].Load(); p != nil && (p.isUp() || p.Failed() != nil) {
		return p, nil
	}
	return t.link(ctx, r, op)
}

// Recv implements transport.Transport.
func (t *Transport) Recv(ctx context.Context, from int) (transport.Message, error) {
	p, err := t.peer(ctx, from, "recv from")
	if err != nil {
		return transport.Message{}, err
	}
	return mesh.Receive(p.ready, &p.Fault, func(ready func() bool) error { return t.await(ctx, p, p.recvNote, ready) })
}

func (p *peer) takeCredit() bool {
	p.cmu.Lock()
	defer p.cmu.Unlock()
	return p.cr.take()
}

func (p *peer) hasCredit() bool {
	p.cmu.Lock()
	defer p.cmu.Unlock()
	return p.cr.avail > 0
}

func (p *peer) refundCredit() {
	p.cmu.Lock()
	p.cr.avail++
	p.cmu.Unlock()
}

// Send implements transport.Transport. Messages up to the inline size go
// in the work request itself; larger ones are copied to this peer's
// staging slot and written from there, so p is free on return without
// waiting for the write to complete, unless p lies in registered memory
// (see Register).
func (t *Transport) Send(ctx context.Context, to int, b []byte) error {
	_, err := t.SendParts(ctx, to, nil, b, true)
	return err
}

// SendParts implements transport.PartSender: head and body are copied
// straight into the staging slot (or joined for an inline write), or the
// body is read from registered memory, so a layer that prefixes a header
// of its own (collectives.Mux) need not join them first. Without wait,
// having no credit, it polls the completion queue once for a returned
// one; it may still wait for this rank's own device (the staging slot's
// last write, a send queue entry), never for the peer.
func (t *Transport) SendParts(ctx context.Context, to int, head, body []byte, wait bool) (bool, error) {
	if !wait && to >= 0 && to < t.size && to != t.rank && t.life != nil && t.life.Err() == nil {
		if p := t.peers[to].Load(); p == nil || !p.isUp() {
			// Bringing a queue pair up waits for the peer, which this
			// call must not: it starts that in the background, and the
			// caller retries or sends the usual way (see
			// transport.PartSender).
			t.linkLater(to)
			return false, nil
		}
	}
	p, err := t.sendPeer(ctx, to, head, body)
	if err != nil {
		return false, err
	}
	if wait {
		for !p.takeCredit() {
			if p.Failed() != nil {
				return false, p.Error("send to")
			}
			if err := t.await(ctx, p, p.sendNote, p.hasCredit); err != nil {
				return false, &transport.PeerError{Peer: to, Op: "send to", Err: err}
			}
		}
	} else if !p.takeCredit() {
		// The credit may be in the completion queue already: one pass,
		// if no other call is driving it, without waiting.
		select {
		case t.progress <- struct{}{}:
			_, err = t.pass()
			<-t.progress
		default:
		}
		if p.Failed() != nil {
			return false, p.Error("send to")
		}
		if err != nil || !p.takeCredit() {
			return false, nil // a Send, which the caller falls back to, says what failed
		}
	}
	if err := p.writeData(ctx, head, body); err != nil {
		p.refundCredit() // nothing was posted
		return false, err
	}
	return true, nil
}

// sendPeer checks a send of head and body to rank to.
func (t *Transport) sendPeer(ctx context.Context, to int, head, body []byte) (*peer, error) {
	if n := len(head) + len(body); n > t.opts.SlotSize {
		return nil, fmt.Errorf("rdma: send of %d bytes to rank %d exceeds the %d-byte slot: %w", n, to, t.opts.SlotSize, ErrInvalid)
	}
	return t.peer(ctx, to, "send to")
}

// writeData writes head then body, as one message, into the peer's next
// slot; the caller holds its credit.
func (p *peer) writeData(ctx context.Context, head, body []byte) error {
	t := p.t
	p.smu.Lock()
	defer p.smu.Unlock()
	// The slot is chosen under smu, so that an abort notice (see shut)
	// can take a slot while a send is in flight.
	slot := p.sendSeq % t.opts.Slots
	n := len(head) + len(body)
	inline := n <= p.inline
	var zc *region
	if !inline && p.sges >= 2 && len(body) >= t.opts.ZeroCopyMin {
		// Held until the device has read the body: deregistering waits.
		t.registry.mu.RLock()
		defer t.registry.mu.RUnlock()
		zc = t.registered(body)
	}
	if !inline {
		// The staging slot is read by the NIC until the write that last
		// used it completes.
		need := p.stageWR[slot]
		if err := p.waitLocked(ctx, func() bool { return p.sqDone.Load() >= need }); err != nil {
			return err
		}
	}
	if err := p.waitLocked(ctx, p.roomLocked); err != nil {
		return err
	}
	// The credits owed go with the data (see encodeData). Releases that
	// come in meanwhile stay owed: only what the immediate says is taken
	// off the count.
	credits := 0
	if !p.gone && !t.closing.Load() {
		credits = int(min(p.pending.Load(), maxPiggyback))
	}
	imm := encodeData(credits, n)
	raddr := p.remoteAddr + uint64(slot*t.opts.SlotSize)
	// Inline, the device copies the data into the request; otherwise it
	// reads the staging slot, whose write is signalled so that the slot
	// is known free again once it completes.
	var first, second gather
	switch {
	case inline && len(head) == 0:
		if n > 0 {
			first.data = unsafe.Pointer(&body[0])
		}
		first.n = n
	case inline:
		// One gather element per request: the two parts are joined
		// here, and the device copies them on before the post returns.
		b := p.joined[:n]
		copy(b[copy(b, head):], body)
		first = gather{unsafe.Pointer(&b[0]), n, 0}
	case zc != nil:
		// Zero-copy: the head goes through the staging slot, the body
		// straight from the caller's registered memory.
		if len(head) > 0 {
			off := slot * t.opts.SlotSize
			first = gather{unsafe.Pointer(&p.stage[off]), copy(p.stage[off:], head), p.sendLKey}
		}
		second = gather{unsafe.Pointer(&body[0]), len(body), zc.lkey}
	default:
		off := slot * t.opts.SlotSize
		b := p.stage[off : off+n]
		copy(b[copy(b, head):], body)
		first = gather{unsafe.Pointer(&b[0]), n, p.sendLKey}
	}
	seq, err := p.postLocked(opWriteImm, !inline, inline, first, second, raddr, imm)
	if err != nil {
		return err
	}
	if !inline {
		p.stageWR[slot] = seq
	}
	p.sendSeq++
	p.pending.Add(int32(-credits))
	if zc != nil {
		// p is the caller's again only once the device has read it.
		p.zeroCopies++
		if err := p.waitLocked(ctx, func() bool { return p.sqDone.Load() >= seq }); err != nil {
			// The write may still be reading the caller's memory, which
			// is the caller's again: what the peer gets is unknown.
			p.fail(fmt.Errorf("%w: a zero-copy send was interrupted before the device had read the data (%v)", transport.ErrPeerLost, err))
			return err
		}
	}
	return nil
}

// noticeLocked writes why, the text of an abort notice, into the slot the
// peer reads next, and says how many bytes it wrote: none unless a credit,
// the staging slot and two send requests are free at once, for an abort
// never waits.
func (p *peer) noticeLocked(why []byte) int {
	t := p.t
	slot := p.sendSeq % t.opts.Slots
	if len(why) == 0 || p.wrSeq+2-p.sqDone.Load() > uint64(t.sqDepth) ||
		p.sqDone.Load() < p.stageWR[slot] || !p.takeCredit() {
		return 0
	}
	off := slot * t.opts.SlotSize
	n := copy(p.stage[off:off+min(len(why), t.opts.SlotSize)], why)
	raddr := p.remoteAddr + uint64(off)
	// A plain write, no immediate: the control message after it says
	// where the text is, and the queue pair's order puts the text in the
	// slot before the peer sees that message.
	seq, err := p.postLocked(opRDMAWrite, false, false, gather{unsafe.Pointer(&p.stage[off]), n, p.sendLKey}, gather{}, raddr, 0)
	if err != nil {
		return 0
	}
	p.stageWR[slot] = seq
	p.sendSeq++
	return n
}

// waitLocked waits, holding smu, until ready holds. Only the progress
// engine advances what ready looks at, and the engine never takes smu
// (it only tries it), so holding it here blocks no one that matters.
func (p *peer) waitLocked(ctx context.Context, ready func() bool) error {
	for !ready() {
		if p.t.closing.Load() || p.gone {
			return &transport.PeerError{Peer: p.rank, Op: "send to", Err: transport.ErrClosed}
		}
		if p.Failed() != nil {
			return p.Error("send to")
		}
		if err := p.t.await(ctx, p, p.sendNote, ready); err != nil {
			return &transport.PeerError{Peer: p.rank, Op: "send to", Err: err}
		}
	}
	if p.t.closing.Load() || p.gone {
		return &transport.PeerError{Peer: p.rank, Op: "send to", Err: transport.ErrClosed}
	}
	if p.Failed() != nil {
		return p.Error("send to")
	}
	return nil
}

// roomLocked says whether the send queue has a free entry. Completions
// are reported only for signalled requests, and a completion covers every
// request before it, so a request is counted free once a later signalled
// one has completed.
func (p *peer) roomLocked() bool {
	return p.wrSeq-p.sqDone.Load() < uint64(p.t.sqDepth)
}

// postLocked posts one send request, signalled if asked to or if the
// last sigEvery went unsignalled, and returns its sequence number.
func (p *peer) postLocked(opcode int, signal, inline bool, a, b gather, raddr uint64, imm uint32) (uint64, error) {
	t := p.t
	seq := p.wrSeq + 1
	var flags uint
	if inline {
		flags |= flagInline
	}
	if signal || seq-p.lastSig >= t.sigEvery {
		flags |= flagSignaled
	}
	if err := t.h.postSend(p.qp, wrID(wrSend, p.rank, seq), opcode, flags, a, b, raddr, p.remoteRKey, imm); err != nil {
		// The send queue is sized so that it never overflows: a failed
		// post means the queue pair is in error.
		p.fail(fmt.Errorf("%w: %v", transport.ErrPeerLost, err))
		return 0, p.Error("send to")
	}
	p.wrSeq = seq
	if flags&flagSignaled != 0 {
		p.lastSig = seq
	}
	return seq, nil
}

// HasCredit implements transport.CreditReporter. A peer without a queue
// pair up yet has every slot free: Send makes the queue pair first.
func (t *Transport) HasCredit(to int) bool {
	if to < 0 || to >= t.size {
		return true
	}
	p := t.peers[to].Load()
	return p == nil || !p.isUp() || p.Failed() != nil || p.hasCredit()
}

// Release implements transport.Transport.
func (t *Transport) Release(m transport.Message) {
	if m.Peer < 0 || int(m.Peer) >= t.size {
		return
	}
	p := t.peers[m.Peer].Load()
	if p == nil {
		return
	}
	defer t.unhold()
	if int(p.pending.Add(1)) >= creditBatch(t.opts.Slots) && p.smu.TryLock() {
		p.flushCreditsLocked()
		p.smu.Unlock()
	}
}

// flushCreditsLocked returns released slots to the peer, if the send
// queue has room; otherwise they stay owed and go on a later pass.
func (p *peer) flushCreditsLocked() {
	c := p.pending.Load()
	if c == 0 || p.gone || p.t.closing.Load() || p.Failed() != nil || !p.isUp() || !p.roomLocked() {
		return
	}
	if _, err := p.postLocked(opSendImm, false, false, gather{}, gather{}, 0, encodeCtl(ctlCredit, int(c))); err == nil {
		p.pending.Add(-c)
		p.creditMsgs++
	}
}

// await returns once ready() holds, or p failed (the caller looks), or
// with an error once ctx ends or the transport closes. Meanwhile it
// either drives the CQ itself or waits to be told that something arrived
// for p or that its turn has come.
func (t *Transport) await(ctx context.Context, p *peer, note chan struct{}, ready func() bool) error {
	return mesh.Await(ctx, t.progress, t.closed, note, p.Dead(), ready,
		func() bool { return p.Failed() != nil },
		func() error { return t.drive(ctx, p, ready) })
}

// drive polls the CQ until ready() holds, p fails, ctx ends or the
// transport closes: busy for Options.Spin, then sleeping on the
// completion channel a slice at a time. Each pass that finds nothing
// returns the credits owed; before it sleeps it probes the peers, now
// and then.
//
// The clock is read only every few empty passes, the first time to
// start the spin budget: a clock read can cost more than a pass, as
// under qemu TCG, whose guest reads the emulated HPET (time.Now was 29%
// of the CPU profile of BenchmarkExchange there). A crowded rank, whose
// budget is short and whose spinning keeps a peer off the CPU, reads it
// every other pass.
func (t *Transport) drive(ctx context.Context, p *peer, ready func() bool) error {
	clockEvery := 16
	if t.opts.Crowded {
		clockEvery = 2
	}
	var spinUntil time.Time
	spinning, empty := t.opts.Spin > 0, 0
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		n, err := t.pass()
		if err != nil {
			return err
		}
		if ready() || p.Failed() != nil {
			return nil
		}
		if err := mesh.Ended(ctx, t.closed); err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		// Nothing arrived, so this rank waits; credits it still owes (fewer
		// than a batch) go back now, not only before it sleeps: the peer
		// may be waiting for exactly those, and an engine that never
		// sleeps (a long Spin) would otherwise keep them for good.
		t.returnCredits()
		if spinning {
			if empty++; empty%clockEvery != 0 {
				continue
			}
			now := time.Now()
			if spinUntil.IsZero() {
				spinUntil = now.Add(t.opts.Spin)
			}
			if now.Before(spinUntil) {
				continue
			}
			spinning = false
		}
		t.probe()
		if stop == nil && ctx.Done() != nil {
			stop = context.AfterFunc(ctx, t.wake)
		}
		if err := t.sleep(pollSliceMs); err != nil {
			return err
		}
	}
}

// returnCredits returns the credits owed to every peer whose send lock
// is free.
func (t *Transport) returnCredits() {
	for _, p := range t.list {
		if p.pending.Load() > 0 && p.smu.TryLock() {
			p.flushCreditsLocked()
			p.smu.Unlock()
		}
	}
}

// probe sends every peer whose queue pair is up an empty RDMA write, once
// per ProbeInterval: it touches no memory and raises no completion at the
// peer, but a dead peer acknowledges nothing, and the queue pair fails
// with IBV_WC_RETRY_EXC_ERR once the retries run out.
func (t *Transport) probe() {
	if time.Since(t.lastProbe) < t.opts.ProbeInterval {
		return
	}
	t.lastProbe = time.Now()
	for _, p := range t.list {
		if p.Failed() != nil || !p.isUp() || !p.smu.TryLock() {
			continue
		}
		if !p.gone && !t.closing.Load() && p.roomLocked() {
			p.postLocked(opRDMAWrite, true, false, gather{}, gather{}, p.remoteAddr, 0)
		}
		p.smu.Unlock()
	}
}

// sleep waits on the completion channel for up to ms milliseconds.
func (t *Transport) sleep(ms int) error {
	if err := t.h.arm(); err != nil {
		return err
	}
	// A completion that arrived before arming raises no event.
	if n, err := t.pass(); n > 0 || err != nil {
		return err
	}
	fds := [2]unix.PollFd{{Fd: int32(t.h.chfd), Events: unix.POLLIN}, {Fd: int32(t.wakefd), Events: unix.POLLIN}}
	if _, err := unix.Poll(fds[:], ms); err != nil && err != unix.EINTR {
		return fmt.Errorf("rdma: poll: %w", err)
	}
	if fds[0].Revents != 0 {
		t.h.drainEvents()
	}
	if fds[1].Revents != 0 {
		var buf [8]byte
		unix.Read(t.wakefd, buf[:])
	}
	return nil
}

// wake interrupts a sleep; after destroy it does nothing.
func (t *Transport) wake() {
	var one [8]byte
	one[0] = 1
	t.wakeMu.Lock()
	defer t.wakeMu.Unlock()
	if t.wakefd >= 0 {
		unix.Write(t.wakefd, one[:])
	}
}

// pass takes what the CQ holds and acts on it: slots filled, credits
// returned, sends completed, failures. Then it replaces the receives
// consumed.
func (t *Transport) pass() (int, error) {
	t.adopt()
	n, err := t.h.poll(t.wcs)
	if err != nil || n == 0 {
		return n, err
	}
	for i := range t.wcs[:n] {
		t.complete(&t.wcs[i])
	}
	for _, p := range t.list {
		if p.flushed {
			p.flushed = false
			p.fail(&WCError{Status: wcFlushErr, Op: "work request"})
		}
		if p.repost > 0 {
			if p.Failed() == nil && !t.closing.Load() {
				if err := t.h.postRecvs(p.qp, wrID(wrRecv, p.rank, 0), p.repost); err != nil {
					p.fail(fmt.Errorf("%w: %v", transport.ErrPeerLost, err))
				}
			}
			p.repost = 0
		}
	}
	return n, nil
}

func (t *Transport) complete(w *wc) {
	kind, r, seq := splitWRID(w.wrID)
	var p *peer
	if r < t.size {
		p = t.peers[r].Load()
	}
	if p == nil {
		logging.L().Warn("rdma: completion for no known peer", "rank", t.rank, "wr_id", w.wrID)
		return
	}
	if w.status != wcSuccess {
		p.broken = true
		if w.status == wcFlushErr {
			// Flushed requests follow the failure that put the queue
			// pair in error; that one names the cause, so wait for the
			// end of the pass before settling for "flushed".
			p.flushed = true
			return
		}
		op := "RDMA write to the peer"
		if kind == wrRecv {
			op = "receive from the peer"
		}
		p.fail(&WCError{Status: int(w.status), VendorErr: w.vendorErr, Op: op})
		return
	}
	switch kind {
	case wrSend:
		p.sqDone.Store(seq)
		notify(p.sendNote)
	case wrRecv:
		p.repost++
		// The peer wrote, so its queue pair is up, and it brought it up
		// only once ours received: a lost last word of the exchange
		// (links.go) does not keep this rank from answering. rts, under
		// the lock the exchange held, also orders the exchange's writes
		// (the peer's slab address) before the writes this allows.
		if !p.isUp() && p.rts() {
			p.markUp()
		}
		switch w.opcode {
		case wcOpRecvImm:
			t.arrived(p, w.imm)
		case wcOpRecv:
			t.control(p, w.imm)
		default:
			p.protocolError("unexpected completion opcode %d", w.opcode)
		}
	default:
		p.protocolError("completion with unknown work request id %#x", w.wrID)
	}
}

// arrived hands a filled slot to Recv.
func (t *Transport) arrived(p *peer, imm uint32) {
	credits, n := decodeData(imm)
	if p.ended || n > t.opts.SlotSize {
		p.protocolError("write of %d bytes (at most %d)", n, t.opts.SlotSize)
		return
	}
	if credits > 0 && !t.grant(p, credits) {
		return
	}
	slot := p.recvSeq % t.opts.Slots
	p.recvSeq++
	if t.closing.Load() {
		return // nobody will receive it
	}
	off := slot * t.opts.SlotSize
	t.held.Add(1)
	select {
	case p.ready <- transport.Message{Data: p.slab[off : off+n : off+n], Peer: int32(p.rank), Slot: int32(slot)}:
		notify(p.recvNote)
	default:
		t.held.Add(-1)
		p.protocolError("peer wrote into a slot it held no credit for")
	}
}

// grant adds credits p returned, and reports whether p is still sound:
// more credits than were lent is a protocol violation.
func (t *Transport) grant(p *peer, credits int) bool {
	p.cmu.Lock()
	err := p.cr.grant(credits)
	p.cmu.Unlock()
	if err != nil {
		p.fail(fmt.Errorf("%w: %w", transport.ErrPeerLost, err))
		return false
	}
	notify(p.sendNote)
	return true
}

func (t *Transport) control(p *peer, imm uint32) {
	kind, arg := decodeCtl(imm)
	switch kind {
	case ctlCredit:
		t.grant(p, arg)
	case ctlBye:
		p.ended = true
		p.fail(transport.ErrPeerClosed)
	case ctlAbort:
		p.ended = true
		if arg == 0 {
			p.fail(fmt.Errorf("%w: the peer aborted", transport.ErrPeerLost))
			return
		}
		// The notice's text is in the slot this rank reads next (see
		// noticeLocked).
		if arg > min(maxAbortText, t.opts.SlotSize) {
			p.protocolError("abort notice of %d bytes (at most %d)", arg, maxAbortText)
			return
		}
		off := p.recvSeq % t.opts.Slots * t.opts.SlotSize
		p.fail(fmt.Errorf("%w: rank %d gave up: %s", transport.ErrPeerLost, p.rank, safetext.Printable(p.slab[off:off+arg])))
	default:
		p.protocolError("unknown control message %#x", imm)
	}
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (p *peer) protocolError(format string, args ...any) {
	p.fail(fmt.Errorf("%w: %s: %w", transport.ErrPeerLost, fmt.Sprintf(format, args...), errProtocol))
}

// fail marks the peer unusable with cause err (the first cause wins) and
// wakes everyone waiting on it; the loss is recorded first (see
// mesh.Fault.Fail).
func (p *peer) fail(err error) { p.Fail(err, p.t.loss) }

// Lost implements transport.LossNotifier.
func (t *Transport) Lost() <-chan struct{} { return t.loss.Lost() }

// LostErr implements transport.LossNotifier: every peer lost so far, in
// the order noticed.
func (t *Transport) LostErr() error { return t.loss.LostErr() }

// Close implements transport.Transport. It wakes every pending call with
// ErrClosed, stops making queue pairs, says goodbye to every peer it has
// one with, and polls on until each such peer has said goodbye too and
// ours are acknowledged (at most CloseLinger), so that no peer's write
// meets a queue pair already gone; then it releases everything.
func (t *Transport) Close() error {
	t.shut(ctlBye, t.opts.CloseLinger, nil)
	return nil
}

// Abort implements transport.Aborter: it tells every peer it has a queue
// pair with that this rank aborted, so their pending and later calls fail
// with ErrPeerLost naming it, and tears the mesh down without waiting for
// anyone's goodbye. A peer the message does not reach learns when its
// next write or probe goes unanswered; one without a queue pair, when its
// exchange with this rank is refused (or from the store). The notice carries cause's text (at most maxAbortText
// bytes) when the peer has a slot free for it, as it nearly always has;
// otherwise the peer learns only that this rank aborted.
func (t *Transport) Abort(cause error) error {
	var why []byte
	if cause != nil {
		why = []byte(cause.Error())
		if len(why) > maxAbortText {
			why = append(why[:maxAbortText-3:maxAbortText-3], "..."...)
		}
	}
	t.shut(ctlAbort, 200*time.Millisecond, why)
	return nil
}

// maxAbortText bounds the text of an abort notice.
const maxAbortText = 512

func (t *Transport) shut(kind int, linger time.Duration, why []byte) {
	t.closeOnce.Do(func() {
		t.loss.Stop() // failures from here on are goodbyes, not losses
		close(t.closed)
		// No queue pair is made or brought up from here on.
		t.stopLinks()
		if t.wakefd < 0 {
			t.destroy()
			return
		}
		t.wake()
		t.progress <- struct{}{} // the engine is ours for good
		t.closing.Store(true)
		t.adopt()
		deadline := time.Now().Add(linger)
		if l := logging.L(); l.Enabled(context.Background(), slog.LevelDebug) {
			var sent, credits, zc int
			for _, p := range t.list {
				p.smu.Lock()
				sent, credits, zc = sent+p.sendSeq, credits+p.creditMsgs, zc+p.zeroCopies
				p.smu.Unlock()
			}
			l.Debug("rdma mesh closing", "rank", t.rank, "messages_sent", sent, "zero_copy", zc, "credit_messages", credits)
		}
		for _, p := range t.list {
			if err := p.Failed(); err != nil && !errors.Is(err, transport.ErrPeerClosed) || !p.isUp() && !p.rts() {
				// A peer whose queue pair never left INIT here has
				// written nothing and waits for nothing from us.
				continue
			}
			p.smu.Lock()
			for !p.roomLocked() && !p.broken && time.Now().Before(deadline) {
				if n, _ := t.pass(); n == 0 {
					t.sleep(1)
				}
			}
			if p.roomLocked() {
				arg := 0
				if kind == ctlAbort {
					arg = p.noticeLocked(why)
				}
				p.byeSeq, _ = p.postLocked(opSendImm, true, false, gather{}, gather{}, 0, encodeCtl(kind, arg))
			}
			p.smu.Unlock()
		}
		if kind == ctlAbort {
			for _, p := range t.list {
				p.fail(transport.ErrClosed)
			}
		}
		for time.Now().Before(deadline) {
			done := true
			for _, p := range t.list {
				if p.broken {
					continue
				}
				if p.byeSeq != 0 && p.sqDone.Load() < p.byeSeq {
					done = false
				}
				// A peer not known to be up (the last word of its
				// exchange had not come when the connection manager
				// stopped) may never have learned our numbers: our
				// goodbye is acknowledged or fails, but it may send
				// none.
				if kind == ctlBye && p.isUp() && !p.ended && !errors.Is(p.Failed(), transport.ErrPeerLost) {
					done = false
				}
			}
			if done {
				break
			}
			if n, _ := t.pass(); n == 0 {
				t.sleep(min(pollSliceMs, int(time.Until(deadline)/time.Millisecond)+1))
			}
		}
		for _, p := range t.list {
			p.fail(transport.ErrClosed)
		}
		t.destroy()
	})
}

var (
	_ transport.Transport    = (*Transport)(nil)
	_ transport.Aborter      = (*Transport)(nil)
	_ transport.LossNotifier = (*Transport)(nil)
	_ transport.PartSender   = (*Transport)(nil)
	_ transport.Registrar    = (*Transport)(nil)
)

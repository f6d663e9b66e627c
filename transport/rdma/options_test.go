package rdma

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gocoll/gocoll/internal/mesh"
	"github.com/gocoll/gocoll/transport"
)

func TestImmediateData(t *testing.T) {
	for _, c := range []struct{ credits, n int }{{0, 0}, {0, 1}, {1, 4096}, {maxPiggyback, MaxSlotSize}, {77, MaxSlotSize - 1}, {3, 12345}} {
		imm := encodeData(c.credits, c.n)
		if cr, n := decodeData(imm); cr != c.credits || n != c.n {
			t.Errorf("%d credits, %d bytes: encoded %#x, decoded %d credits, %d bytes", c.credits, c.n, imm, cr, n)
		}
	}
	// The largest slot size must fit the length field with room for
	// every length up to it.
	if MaxSlotSize > immLenMask {
		t.Fatalf("MaxSlotSize %d does not fit %d bits", MaxSlotSize, immLenBits)
	}
	if immLenBits+immCreditBits != 32 || maxPiggyback != 1<<immCreditBits-1 {
		t.Fatalf("credit and length fields do not fill the 32-bit immediate")
	}
}

func TestControlData(t *testing.T) {
	for _, c := range []struct{ kind, arg int }{{ctlCredit, 1}, {ctlCredit, maxSlots}, {ctlBye, 0}, {ctlAbort, 0}, {ctlCredit, ctlArgMax}} {
		if k, a := decodeCtl(encodeCtl(c.kind, c.arg)); k != c.kind || a != c.arg {
			t.Errorf("kind %d arg %d: decoded kind %d arg %d", c.kind, c.arg, k, a)
		}
	}
}

func TestCredits(t *testing.T) {
	c := credits{avail: 4, slots: 4}
	for i := 0; i < 4; i++ {
		if !c.take() {
			t.Fatalf("take %d of 4 failed", i)
		}
	}
	if c.take() {
		t.Fatal("took a fifth credit of four")
	}
	if err := c.grant(3); err != nil || c.avail != 3 {
		t.Fatalf("grant 3: %v, avail %d", err, c.avail)
	}
	if err := c.grant(2); !errors.Is(err, errProtocol) || c.avail != 3 {
		t.Fatalf("granting more than lent: %v, avail %d", err, c.avail)
	}
	if err := c.grant(0); !errors.Is(err, errProtocol) {
		t.Fatalf("an empty grant: %v", err)
	}
	if err := c.grant(1); err != nil || c.avail != 4 {
		t.Fatalf("grant 1: %v, avail %d", err, c.avail)
	}
	for slots, want := range map[int]int{2: 1, 3: 1, 4: 2, 8: 4, 128: 64} {
		if got := creditBatch(slots); got != want {
			t.Errorf("creditBatch(%d) = %d, want %d", slots, got, want)
		}
	}
}

func TestWRID(t *testing.T) {
	for _, c := range []struct {
		kind, rank int
		seq        uint64
	}{{wrRecv, 0, 0}, {wrSend, 65535, seqMask}, {wrSend, 7, 123456789}} {
		k, r, s := splitWRID(wrID(c.kind, c.rank, c.seq))
		if k != c.kind || r != c.rank || s != c.seq {
			t.Errorf("%+v: got kind %d rank %d seq %d", c, k, r, s)
		}
	}
}

func TestWCError(t *testing.T) {
	err := error(&transport.PeerError{Peer: 3, Op: "recv from", Err: &WCError{Status: wcRetryExc, VendorErr: 0x81, Op: "RDMA write to the peer"}})
	if !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("%v does not wrap ErrPeerLost", err)
	}
	for _, want := range []string{"rank 3", "IBV_WC_RETRY_EXC_ERR", "unreachable or dead", "0x81"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if got := WCStatusName(wcRemAccess); got != "IBV_WC_REM_ACCESS_ERR" {
		t.Errorf("status 10 is %s", got)
	}
	if got := WCStatusName(99); got != "ibv_wc_status(99)" {
		t.Errorf("status 99 is %s", got)
	}
	if got := WCStatusName(23); got != "IBV_WC_TM_RNDV_INCOMPLETE" {
		t.Errorf("status 23 is %s", got)
	}
}

func TestMemlock(t *testing.T) {
	if err := memlockError(1<<20, 64<<10, false, false); !errors.Is(err, ErrMemlock) || !errors.Is(err, ErrUnavailable) ||
		!strings.Contains(err.Error(), "64 KiB") || !strings.Contains(err.Error(), "1024 KiB") || !strings.Contains(err.Error(), "ulimit -l") {
		t.Errorf("over the limit: %v", err)
	}
	for _, c := range []struct {
		need, limit    uint64
		unlimited, cap bool
	}{{1 << 20, 1 << 20, false, false}, {1 << 30, 0, true, false}, {1 << 30, 64 << 10, false, true}} {
		if err := memlockError(c.need, c.limit, c.unlimited, c.cap); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func TestInfo(t *testing.T) {
	in := &info{rank: 1, size: 3, slots: 4, slotSize: 1 << 19, namespace: nsHash("c1"), lid: 7, mtu: 3, linkLayer: 2,
		qp: peerInfo{qpn: 17, psn: 0xabcdef, addr: 1 << 40, rkey: 99}}
	in.gid[0], in.gid[15] = 0xfe, 1
	got, err := parseInfo(in.marshal())
	if err != nil {
		t.Fatal(err)
	}
	if *got != *in {
		t.Fatalf("round trip: %+v", got)
	}
	mine := *in
	mine.rank = 0
	if err := got.check(&mine, 1); err != nil {
		t.Fatal(err)
	}
	if err := got.check(&mine, -1); err != nil {
		t.Fatalf("any rank may call: %v", err)
	}
	if err := got.check(&mine, 2); !errors.Is(err, ErrMismatch) {
		t.Errorf("record of the wrong rank: %v", err)
	}
	if err := got.check(in, -1); !errors.Is(err, ErrMismatch) {
		t.Errorf("a record claiming this rank's own number: %v", err)
	}
	big := *got
	big.rank = 3
	if err := big.check(&mine, -1); !errors.Is(err, ErrMismatch) {
		t.Errorf("a rank past the job's size: %v", err)
	}
	other := mine
	other.slots = 8
	if err := got.check(&other, 1); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "same transport options") {
		t.Errorf("slot mismatch: %v", err)
	}
	other = mine
	other.namespace = nsHash("c2")
	if err := got.check(&other, 1); !errors.Is(err, ErrMismatch) {
		t.Errorf("namespace mismatch: %v", err)
	}
	b := in.marshal()
	for _, bad := range [][]byte{nil, b[:10], b[:len(b)-1], append([]byte("XXXX"), b[4:]...), append(b, 0)} {
		if _, err := parseInfo(bad); !errors.Is(err, errProtocol) {
			t.Errorf("%d bytes: %v", len(bad), err)
		}
	}
}

func TestOptionsFill(t *testing.T) {
	var o Options
	if err := o.fill(); err != nil {
		t.Fatal(err)
	}
	if o.Slots != DefaultSlots || o.SlotSize != DefaultSlotSize || o.Timeout != DefaultTimeout || o.RetryCount != DefaultRetryCount ||
		o.RNRRetry != DefaultRNRRetry || o.MaxInline != defaultInline || o.Spin != mesh.DefaultSpin || o.HandshakeTimeout != mesh.DefaultHandshake || o.ZeroCopyMin != DefaultZeroCopyMin {
		t.Fatalf("defaults: %+v", o)
	}
	o = Options{LinkOptions: transport.LinkOptions{Spin: -1}, RetryCount: -1, MaxInline: -1, ZeroCopyMin: -1}
	if err := o.fill(); err != nil || o.RetryCount != 0 || o.MaxInline != 0 || o.Spin != 0 || o.ZeroCopyMin != math.MaxInt {
		t.Fatalf("explicit zeros: %+v, %v", o, err)
	}
	for _, bad := range []Options{{LinkOptions: transport.LinkOptions{Slots: 1}}, {LinkOptions: transport.LinkOptions{Slots: maxSlots + 1}}, {LinkOptions: transport.LinkOptions{SlotSize: 4<<10 + 1}}, {LinkOptions: transport.LinkOptions{SlotSize: MaxSlotSize + 64}}, {Timeout: 32}, {RetryCount: 8}, {RNRRetry: 8}, {Port: 256}, {GIDIndex: 256}} {
		if err := bad.fill(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
}

//go:build cgo && linux

package rdma

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include "ibv_abi.h"

// The library entry points, resolved once by gc_load. Data-path calls do
// not go through here but through the context's ops table.
static struct {
	void *h;
	struct ibv_device **(*get_device_list)(int *);
	void (*free_device_list)(struct ibv_device **);
	const char *(*get_device_name)(struct ibv_device *);
	struct ibv_context *(*open_device)(struct ibv_device *);
	int (*close_device)(struct ibv_context *);
	int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
	int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
	int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *);
	int (*dealloc_pd)(struct ibv_pd *);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
	int (*dereg_mr)(struct ibv_mr *);
	struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *);
	int (*destroy_comp_channel)(struct ibv_comp_channel *);
	struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
	int (*destroy_cq)(struct ibv_cq *);
	int (*get_cq_event)(struct ibv_comp_channel *, struct ibv_cq **, void **);
	void (*ack_cq_events)(struct ibv_cq *, unsigned int);
	struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
	int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
	int (*destroy_qp)(struct ibv_qp *);
} gc;

#define GC_SYM(field, name) do { \
	*(void **)(&gc.field) = dlsym(gc.h, name); \
	if (!gc.field) { snprintf(err, errlen, "%s: symbol %s missing", lib, name); return -1; } \
} while (0)

static int gc_load(const char *lib, char *err, int errlen) {
	gc.h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!gc.h) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return -1;
	}
	GC_SYM(get_device_list, "ibv_get_device_list");
	GC_SYM(free_device_list, "ibv_free_device_list");
	GC_SYM(get_device_name, "ibv_get_device_name");
	GC_SYM(open_device, "ibv_open_device");
	GC_SYM(close_device, "ibv_close_device");
	GC_SYM(query_device, "ibv_query_device");
	GC_SYM(query_port, "ibv_query_port");
	GC_SYM(query_gid, "ibv_query_gid");
	GC_SYM(alloc_pd, "ibv_alloc_pd");
	GC_SYM(dealloc_pd, "ibv_dealloc_pd");
	GC_SYM(reg_mr, "ibv_reg_mr");
	GC_SYM(dereg_mr, "ibv_dereg_mr");
	GC_SYM(create_comp_channel, "ibv_create_comp_channel");
	GC_SYM(destroy_comp_channel, "ibv_destroy_comp_channel");
	GC_SYM(create_cq, "ibv_create_cq");
	GC_SYM(destroy_cq, "ibv_destroy_cq");
	GC_SYM(get_cq_event, "ibv_get_cq_event");
	GC_SYM(ack_cq_events, "ibv_ack_cq_events");
	GC_SYM(create_qp, "ibv_create_qp");
	GC_SYM(modify_qp, "ibv_modify_qp");
	GC_SYM(destroy_qp, "ibv_destroy_qp");
	return 0;
}

static struct ibv_device **gc_get_device_list(int *n) { return gc.get_device_list(n); }
static void gc_free_device_list(struct ibv_device **l) { gc.free_device_list(l); }
static struct ibv_device *gc_device_at(struct ibv_device **l, int i) { return l[i]; }
static const char *gc_device_name(struct ibv_device *d) { return gc.get_device_name(d); }
static struct ibv_context *gc_open_device(struct ibv_device *d) { return gc.open_device(d); }
static int gc_close_device(struct ibv_context *c) { return gc.close_device(c); }
static int gc_query_device(struct ibv_context *c, struct ibv_device_attr *a) {
	memset(a, 0, sizeof *a);
	return gc.query_device(c, a);
}
static int gc_query_port(struct ibv_context *c, int port, struct ibv_port_attr *a) {
	memset(a, 0, sizeof *a);
	return gc.query_port(c, (uint8_t)port, a);
}
static int gc_query_gid(struct ibv_context *c, int port, int index, uint8_t *out) {
	union ibv_gid g;
	int rc = gc.query_gid(c, (uint8_t)port, index, &g);
	if (rc == 0) memcpy(out, g.raw, 16);
	return rc;
}
static struct ibv_pd *gc_alloc_pd(struct ibv_context *c) { return gc.alloc_pd(c); }
static int gc_dealloc_pd(struct ibv_pd *p) { return gc.dealloc_pd(p); }
static struct ibv_mr *gc_reg_mr(struct ibv_pd *p, void *addr, size_t len, int access) {
	return gc.reg_mr(p, addr, len, access);
}
static int gc_dereg_mr(struct ibv_mr *m) { return gc.dereg_mr(m); }
static uint32_t gc_mr_lkey(struct ibv_mr *m) { return m->lkey; }
static uint32_t gc_mr_rkey(struct ibv_mr *m) { return m->rkey; }

static struct ibv_comp_channel *gc_create_channel(struct ibv_context *c) {
	struct ibv_comp_channel *ch = gc.create_comp_channel(c);
	if (ch) {
		// The channel is only read once poll(2) says it is readable, but
		// a non-blocking descriptor makes a spurious wake-up harmless.
		int fl = fcntl(ch->fd, F_GETFL);
		fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	}
	return ch;
}
static int gc_channel_fd(struct ibv_comp_channel *ch) { return ch->fd; }
static int gc_destroy_channel(struct ibv_comp_channel *ch) { return gc.destroy_comp_channel(ch); }
static struct ibv_cq *gc_create_cq(struct ibv_context *c, int cqe, struct ibv_comp_channel *ch) {
	return gc.create_cq(c, cqe, NULL, ch, 0);
}
static int gc_destroy_cq(struct ibv_cq *cq) { return gc.destroy_cq(cq); }

// gc_cq_event consumes one completion event, if any, and acknowledges it
// at once, so that destroying the CQ never waits for an unacknowledged one.
static int gc_cq_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *ctx;
	if (gc.get_cq_event(ch, &cq, &ctx) != 0) return 0;
	gc.ack_cq_events(cq, 1);
	return 1;
}

static int gc_req_notify(struct ibv_context *c, struct ibv_cq *cq) {
	return c->ops.req_notify_cq(cq, 0);
}

static struct ibv_qp *gc_create_qp(struct ibv_pd *pd, struct ibv_cq *cq, int send_wr, int recv_wr, int send_sge, int inline_size, int *inline_out) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq;
	a.recv_cq = cq;
	a.cap.max_send_wr = send_wr;
	a.cap.max_recv_wr = recv_wr;
	a.cap.max_send_sge = send_sge;
	a.cap.max_recv_sge = 1;
	a.cap.max_inline_data = inline_size;
	a.qp_type = GC_QPT_RC;
	a.sq_sig_all = 0;
	struct ibv_qp *qp = gc.create_qp(pd, &a);
	if (qp) *inline_out = a.cap.max_inline_data;
	return qp;
}
static uint32_t gc_qp_num(struct ibv_qp *qp) { return qp->qp_num; }
static int gc_destroy_qp(struct ibv_qp *qp) { return gc.destroy_qp(qp); }

static int gc_qp_to_init(struct ibv_qp *qp, int port) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = GC_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = port;
	a.qp_access_flags = GC_ACCESS_LOCAL_WRITE | GC_ACCESS_REMOTE_WRITE;
	return gc.modify_qp(qp, &a, GC_QP_STATE | GC_QP_PKEY_INDEX | GC_QP_PORT | GC_QP_ACCESS_FLAGS);
}

static int gc_qp_to_rtr(struct ibv_qp *qp, int port, int mtu, uint32_t dest_qpn, uint32_t rq_psn,
		int global, const uint8_t *dgid, int sgid_index, int dlid, int min_rnr_timer) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = GC_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = rq_psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = min_rnr_timer;
	a.ah_attr.dlid = dlid;
	a.ah_attr.sl = 0;
	a.ah_attr.src_path_bits = 0;
	a.ah_attr.port_num = port;
	if (global) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
		a.ah_attr.grh.sgid_index = sgid_index;
		a.ah_attr.grh.hop_limit = 64;
	}
	return gc.modify_qp(qp, &a, GC_QP_STATE | GC_QP_AV | GC_QP_PATH_MTU | GC_QP_DEST_QPN |
		GC_QP_RQ_PSN | GC_QP_MAX_DEST_RD_ATOMIC | GC_QP_MIN_RNR_TIMER);
}

static int gc_qp_to_rts(struct ibv_qp *qp, uint32_t sq_psn, int timeout, int retry, int rnr_retry) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = GC_QPS_RTS;
	a.sq_psn = sq_psn;
	a.timeout = timeout;
	a.retry_cnt = retry;
	a.rnr_retry = rnr_retry;
	a.max_rd_atomic = 1;
	return gc.modify_qp(qp, &a, GC_QP_STATE | GC_QP_SQ_PSN | GC_QP_TIMEOUT | GC_QP_RETRY_CNT |
		GC_QP_RNR_RETRY | GC_QP_MAX_QP_RD_ATOMIC);
}

// gc_post_send posts one work request of at most two gather elements,
// data then data2 (skipped when empty). Each is either registered memory
// (lkey) or, with GC_SEND_INLINE, any memory: the provider copies it into
// the work queue before returning.
static int gc_post_send(struct ibv_context *c, struct ibv_qp *qp, uint64_t wr_id, int opcode, unsigned flags,
		void *data, uint32_t len, uint32_t lkey, void *data2, uint32_t len2, uint32_t lkey2,
		uint64_t raddr, uint32_t rkey, uint32_t imm) {
	struct ibv_sge sge[2];
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.sg_list = sge;
	if (len > 0) {
		sge[wr.num_sge].addr = (uint64_t)(uintptr_t)data;
		sge[wr.num_sge].length = len;
		sge[wr.num_sge].lkey = lkey;
		wr.num_sge++;
	}
	if (len2 > 0) {
		sge[wr.num_sge].addr = (uint64_t)(uintptr_t)data2;
		sge[wr.num_sge].length = len2;
		sge[wr.num_sge].lkey = lkey2;
		wr.num_sge++;
	}
	if (wr.num_sge == 0) wr.sg_list = NULL;
	wr.opcode = opcode;
	wr.send_flags = flags;
	wr.imm_data = htonl(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return c->ops.post_send(qp, &wr, &bad);
}

// gc_post_recvs posts n receives with no buffer: a WRITE with immediate
// lands its payload by address, and a control SEND carries none.
static int gc_post_recvs(struct ibv_context *c, struct ibv_qp *qp, uint64_t wr_id, int n) {
	struct ibv_recv_wr wrs[32], *bad = NULL;
	while (n > 0) {
		int k = n < 32 ? n : 32;
		memset(wrs, 0, sizeof wrs);
		for (int i = 0; i < k; i++) {
			wrs[i].wr_id = wr_id;
			wrs[i].next = i + 1 < k ? &wrs[i + 1] : NULL;
		}
		int rc = c->ops.post_recv(qp, wrs, &bad);
		if (rc) return rc;
		n -= k;
	}
	return 0;
}

// gc_wc is the part of a work completion the engine reads, in host order.
typedef struct {
	uint64_t wr_id;
	uint32_t status, opcode, vendor_err, byte_len, imm, flags;
} gc_wc;

static int gc_poll(struct ibv_context *c, struct ibv_cq *cq, gc_wc *out, int n) {
	struct ibv_wc wc[32];
	if (n > 32) n = 32;
	int got = c->ops.poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].vendor_err = wc[i].vendor_err;
		out[i].byte_len = wc[i].byte_len;
		out[i].flags = wc[i].wc_flags;
		out[i].imm = (wc[i].wc_flags & GC_WC_WITH_IMM) ? ntohl(wc[i].imm_data) : 0;
	}
	return got;
}

// The layout table abi_test.go compares with the real header.
struct gc_abi_entry { const char *name; long value; };
#define ABI_SIZE(t) { "sizeof " #t, (long)sizeof(t) },
#define ABI_FIELD(t, f) { "offsetof " #t " " #f, (long)offsetof(t, f) },
#define ABI_CONST(ours, theirs) { "const " #ours, (long)(ours) },
static const struct gc_abi_entry gc_abi[] = {
#include "abi_fields.h"
};
static int gc_abi_len(void) { return sizeof gc_abi / sizeof gc_abi[0]; }
static const char *gc_abi_name(int i) { return gc_abi[i].name; }
static long gc_abi_value(int i) { return gc_abi[i].value; }
*/
import "C"

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

// libName is the library loaded at run time: the soname rdma-core has
// kept since its first release, so no development package is needed.
const libName = "libibverbs.so.1"

var (
	loadOnce sync.Once
	loadErr  error
)

// load opens libibverbs once per process.
func load() error {
	loadOnce.Do(func() {
		var buf [512]C.char
		lib := C.CString(libName)
		defer C.free(unsafe.Pointer(lib))
		if C.gc_load(lib, &buf[0], C.int(len(buf))) != 0 {
			loadErr = fmt.Errorf("%w (%s; install rdma-core's libibverbs1 package)", ErrNoLibrary, C.GoString(&buf[0]))
		}
	})
	return loadErr
}

// abiTable is this package's view of libibverbs' layout, for abi_test.go.
func abiTable() map[string]int64 {
	m := make(map[string]int64)
	for i := 0; i < int(C.gc_abi_len()); i++ {
		m[C.GoString(C.gc_abi_name(C.int(i)))] = int64(C.gc_abi_value(C.int(i)))
	}
	return m
}

// Verbs constants the engine uses, taken from ibv_abi.h so that abi_test.go
// covers them too.
const (
	opRDMAWrite    = C.GC_WR_RDMA_WRITE
	opWriteImm     = C.GC_WR_RDMA_WRITE_WITH_IMM
	opSendImm      = C.GC_WR_SEND_WITH_IMM
	flagSignaled   = C.GC_SEND_SIGNALED
	flagInline     = C.GC_SEND_INLINE
	wcOpRecv       = C.GC_WC_RECV
	wcOpRecvImm    = C.GC_WC_RECV_RDMA_WITH_IMM
	linkEthernet   = C.GC_LINK_LAYER_ETHERNET
	portActive     = C.GC_PORT_ACTIVE
	maxPollBatch   = 32
	portStateNames = "NOP DOWN INIT ARMED ACTIVE ACTIVE_DEFER"
)

// wc is one polled work completion.
type wc struct {
	wrID                                           uint64
	status, opcode, vendorErr, byteLen, imm, flags uint32
}

// hca is an opened device port with this rank's protection domain,
// completion channel and completion queue.
type hca struct {
	ctx  *C.struct_ibv_context
	pd   *C.struct_ibv_pd
	ch   *C.struct_ibv_comp_channel
	cq   *C.struct_ibv_cq
	chfd int

	name      string
	port      int
	lid       uint16
	mtu       uint8
	linkLayer uint8
	gid       [16]byte
	maxQPWR   int
	maxCQE    int

	cwc [maxPollBatch]C.gc_wc
}

func portState(s int) string {
	names := strings.Fields(portStateNames)
	if s >= 0 && s < len(names) {
		return names[s]
	}
	return strconv.Itoa(s)
}

// openHCA opens the device and port the options name, or the first
// device with an active port.
func openHCA(opts Options) (*hca, error) {
	if err := load(); err != nil {
		return nil, err
	}
	var n C.int
	list, errno := C.gc_get_device_list(&n)
	if list == nil {
		// libibverbs reports ENOSYS when the kernel has no verbs support.
		return nil, fmt.Errorf("%w (ibv_get_device_list: %v; is the kernel's ib_uverbs module loaded?)", ErrNoDevice, errno)
	}
	defer C.gc_free_device_list(list)
	if n == 0 {
		return nil, fmt.Errorf("%w (libibverbs found no device under /sys/class/infiniband)", ErrNoDevice)
	}
	names := make([]string, int(n))
	for i := range names {
		names[i] = C.GoString(C.gc_device_name(C.gc_device_at(list, C.int(i))))
	}
	var why []string
	for i, name := range names {
		if opts.Device != "" && name != opts.Device {
			continue
		}
		h, err := openPort(C.gc_device_at(list, C.int(i)), name, opts)
		if err == nil {
			return h, nil
		}
		if opts.Device != "" {
			return nil, err
		}
		why = append(why, err.Error())
	}
	if opts.Device != "" {
		return nil, fmt.Errorf("%w: %q (devices present: %s)", ErrDeviceNotFound, opts.Device, strings.Join(names, ", "))
	}
	return nil, fmt.Errorf("%w on any device: %s", ErrPortNotActive, strings.Join(why, "; "))
}

func openPort(dev *C.struct_ibv_device, name string, opts Options) (*hca, error) {
	ctx, errno := C.gc_open_device(dev)
	if ctx == nil {
		return nil, fmt.Errorf("%w: ibv_open_device %s: %v", ErrVerbs, name, errno)
	}
	h := &hca{ctx: ctx, name: name, chfd: -1}
	var da C.struct_ibv_device_attr
	if rc := C.gc_query_device(ctx, &da); rc != 0 {
		h.close()
		return nil, fmt.Errorf("%w: ibv_query_device %s: %v", ErrVerbs, name, syscall.Errno(rc))
	}
	h.maxQPWR, h.maxCQE = int(da.max_qp_wr), int(da.max_cqe)
	ports := []int{opts.Port}
	if opts.Port == 0 {
		ports = ports[:0]
		for p := 1; p <= int(da.phys_port_cnt); p++ {
			ports = append(ports, p)
		}
	} else if opts.Port > int(da.phys_port_cnt) {
		h.close()
		return nil, fmt.Errorf("%w: %s has %d ports, port %d asked for", ErrInvalid, name, int(da.phys_port_cnt), opts.Port)
	}
	var states []string
	for _, port := range ports {
		var pa C.struct_ibv_port_attr
		if rc := C.gc_query_port(ctx, C.int(port), &pa); rc != 0 {
			h.close()
			return nil, fmt.Errorf("%w: ibv_query_port %s port %d: %v", ErrVerbs, name, port, syscall.Errno(rc))
		}
		if int(pa.state) != portActive {
			states = append(states, fmt.Sprintf("%s port %d is %s", name, port, portState(int(pa.state))))
			continue
		}
		h.port, h.lid, h.mtu, h.linkLayer = port, uint16(pa.lid), uint8(pa.active_mtu), uint8(pa.link_layer)
		if opts.GIDIndex >= int(pa.gid_tbl_len) && pa.gid_tbl_len > 0 {
			h.close()
			return nil, fmt.Errorf("%w: GID index %d, but %s port %d has %d GIDs", ErrBadGID, opts.GIDIndex, name, port, int(pa.gid_tbl_len))
		}
		if rc := C.gc_query_gid(ctx, C.int(port), C.int(opts.GIDIndex), (*C.uint8_t)(unsafe.Pointer(&h.gid[0]))); rc != 0 {
			h.close()
			return nil, fmt.Errorf("%w: ibv_query_gid %s port %d index %d failed", ErrBadGID, name, port, opts.GIDIndex)
		}
		if h.global() && h.gid == [16]byte{} {
			h.close()
			return nil, fmt.Errorf("%w: GID index %d of %s port %d is empty (pick another with GOCOLL_IB_GID_INDEX; see show_gids)", ErrBadGID, opts.GIDIndex, name, port)
		}
		return h, nil
	}
	h.close()
	return nil, fmt.Errorf("%w: %s (check the link, the subnet manager, or the netdev under a RoCE device)", ErrPortNotActive, strings.Join(states, ", "))
}

// global says whether packets need a global route header: always on
// RoCE, and on InfiniBand only without a LID.
func (h *hca) global() bool { return h.linkLayer == linkEthernet || h.lid == 0 }

// setup creates the protection domain, completion channel and queue.
func (h *hca) setup(cqe int) error {
	var errno error
	if h.pd, errno = C.gc_alloc_pd(h.ctx); h.pd == nil {
		return fmt.Errorf("%w: ibv_alloc_pd: %v", ErrVerbs, errno)
	}
	if h.ch, errno = C.gc_create_channel(h.ctx); h.ch == nil {
		return fmt.Errorf("%w: ibv_create_comp_channel: %v", ErrVerbs, errno)
	}
	h.chfd = int(C.gc_channel_fd(h.ch))
	if h.cq, errno = C.gc_create_cq(h.ctx, C.int(cqe), h.ch); h.cq == nil {
		return fmt.Errorf("%w: ibv_create_cq of %d entries: %v", ErrVerbs, cqe, errno)
	}
	return nil
}

// regMR registers mem for local writes and, if remote, remote writes.
func (h *hca) regMR(mem []byte, remote bool) (mr unsafe.Pointer, lkey, rkey uint32, err error) {
	access := C.int(C.GC_ACCESS_LOCAL_WRITE)
	if remote {
		access |= C.GC_ACCESS_REMOTE_WRITE
	}
	return h.reg(mem, access)
}

// regSource registers mem for the device to read only: the source of
// writes, which needs no access flag, and which leaves read-only or
// copy-on-write pages as they are.
func (h *hca) regSource(mem []byte) (mr unsafe.Pointer, lkey uint32, err error) {
	mr, lkey, _, err = h.reg(mem, 0)
	return mr, lkey, err
}

func (h *hca) reg(mem []byte, access C.int) (mr unsafe.Pointer, lkey, rkey uint32, err error) {
	m, errno := C.gc_reg_mr(h.pd, unsafe.Pointer(&mem[0]), C.size_t(len(mem)), access)
	if m == nil {
		err = fmt.Errorf("%w: ibv_reg_mr of %d bytes on %s: %v", ErrRegister, len(mem), h.name, errno)
		if errno == syscall.ENOMEM || errno == syscall.EPERM || errno == syscall.EAGAIN {
			err = fmt.Errorf("%w (a locked-memory limit too low gives this error: check `ulimit -l`)", err)
		}
		return nil, 0, 0, err
	}
	return unsafe.Pointer(m), uint32(C.gc_mr_lkey(m)), uint32(C.gc_mr_rkey(m)), nil
}

func (h *hca) deregMR(mr unsafe.Pointer) {
	if mr != nil {
		C.gc_dereg_mr((*C.struct_ibv_mr)(mr))
	}
}

// createQP creates an RC queue pair on the shared CQ, asking for inline
// room and two gather elements per send (a header from the staging slab
// and a body from the caller's registered memory); a device that grants
// neither gets a queue pair without, and says how many elements it took.
func (h *hca) createQP(sendWR, recvWR, inline int) (qp unsafe.Pointer, qpn uint32, gotInline, sges int, err error) {
	var got C.int
	var q *C.struct_ibv_qp
	var errno error
	inlines := []int{inline}
	if inline > 0 {
		inlines = append(inlines, 0)
	}
try:
	for sges = 2; sges >= 1; sges-- {
		for _, in := range inlines {
			if q, errno = C.gc_create_qp(h.pd, h.cq, C.int(sendWR), C.int(recvWR), C.int(sges), C.int(in), &got); q != nil {
				break try
			}
		}
	}
	if q == nil {
		return nil, 0, 0, 0, fmt.Errorf("%w: ibv_create_qp (%d send, %d receive entries): %v", ErrVerbs, sendWR, recvWR, errno)
	}
	return unsafe.Pointer(q), uint32(C.gc_qp_num(q)), int(got), sges, nil
}

func (h *hca) destroyQP(qp unsafe.Pointer) {
	if qp != nil {
		C.gc_destroy_qp((*C.struct_ibv_qp)(qp))
	}
}

func (h *hca) qpInit(qp unsafe.Pointer) error {
	if rc := C.gc_qp_to_init((*C.struct_ibv_qp)(qp), C.int(h.port)); rc != 0 {
		return fmt.Errorf("%w: queue pair RESET->INIT: %v", ErrVerbs, syscall.Errno(rc))
	}
	return nil
}

func (h *hca) qpRTR(qp unsafe.Pointer, mtu uint8, destQPN, rqPSN uint32, dgid [16]byte, dlid uint16, gidIndex int) error {
	global := C.int(0)
	if h.global() {
		global = 1
	}
	rc := C.gc_qp_to_rtr((*C.struct_ibv_qp)(qp), C.int(h.port), C.int(mtu), C.uint32_t(destQPN), C.uint32_t(rqPSN),
		global, (*C.uint8_t)(unsafe.Pointer(&dgid[0])), C.int(gidIndex), C.int(dlid), 12)
	if rc != 0 {
		return fmt.Errorf("%w: queue pair INIT->RTR (remote qpn %d): %v", ErrVerbs, destQPN, syscall.Errno(rc))
	}
	return nil
}

func (h *hca) qpRTS(qp unsafe.Pointer, sqPSN uint32, opts Options) error {
	rc := C.gc_qp_to_rts((*C.struct_ibv_qp)(qp), C.uint32_t(sqPSN), C.int(opts.Timeout), C.int(opts.RetryCount), C.int(opts.RNRRetry))
	if rc != 0 {
		return fmt.Errorf("%w: queue pair RTR->RTS: %v", ErrVerbs, syscall.Errno(rc))
	}
	return nil
}

// gather is one gather element of a send request: n bytes at data,
// registered under lkey (ignored for an inline send).
type gather struct {
	data unsafe.Pointer
	n    int
	lkey uint32
}

// postSend posts one send work request of the elements a then b (either
// may be empty); their memory must stay valid until the call returns when
// inline, until its completion otherwise.
func (h *hca) postSend(qp unsafe.Pointer, wrID uint64, opcode int, flags uint, a, b gather, raddr uint64, rkey, imm uint32) error {
	rc := C.gc_post_send(h.ctx, (*C.struct_ibv_qp)(qp), C.uint64_t(wrID), C.int(opcode), C.uint(flags),
		a.data, C.uint32_t(a.n), C.uint32_t(a.lkey), b.data, C.uint32_t(b.n), C.uint32_t(b.lkey),
		C.uint64_t(raddr), C.uint32_t(rkey), C.uint32_t(imm))
	if rc != 0 {
		return fmt.Errorf("ibv_post_send: %v", syscall.Errno(rc))
	}
	return nil
}

func (h *hca) postRecvs(qp unsafe.Pointer, wrID uint64, n int) error {
	if rc := C.gc_post_recvs(h.ctx, (*C.struct_ibv_qp)(qp), C.uint64_t(wrID), C.int(n)); rc != 0 {
		return fmt.Errorf("ibv_post_recv: %v", syscall.Errno(rc))
	}
	return nil
}

// poll takes up to len(out) completions off the CQ.
func (h *hca) poll(out []wc) (int, error) {
	n := int(C.gc_poll(h.ctx, h.cq, &h.cwc[0], C.int(min(len(out), maxPollBatch))))
	if n < 0 {
		return 0, fmt.Errorf("%w: ibv_poll_cq failed (%d)", ErrVerbs, n)
	}
	for i := 0; i < n; i++ {
		c := &h.cwc[i]
		out[i] = wc{wrID: uint64(c.wr_id), status: uint32(c.status), opcode: uint32(c.opcode),
			vendorErr: uint32(c.vendor_err), byteLen: uint32(c.byte_len), imm: uint32(c.imm), flags: uint32(c.flags)}
	}
	return n, nil
}

// arm asks for an event on the channel at the next completion.
func (h *hca) arm() error {
	if rc := C.gc_req_notify(h.ctx, h.cq); rc != 0 {
		return fmt.Errorf("%w: ibv_req_notify_cq: %v", ErrVerbs, syscall.Errno(rc))
	}
	return nil
}

// drainEvents consumes the channel's pending events.
func (h *hca) drainEvents() {
	for C.gc_cq_event(h.ch) != 0 {
	}
}

// close releases the device and what setup created, in reverse order.
func (h *hca) close() {
	if h.cq != nil {
		C.gc_destroy_cq(h.cq)
		h.cq = nil
	}
	if h.ch != nil {
		C.gc_destroy_channel(h.ch)
		h.ch = nil
	}
	if h.pd != nil {
		C.gc_dealloc_pd(h.pd)
		h.pd = nil
	}
	if h.ctx != nil {
		C.gc_close_device(h.ctx)
		h.ctx = nil
	}
}

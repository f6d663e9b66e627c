/*
 * The part of libibverbs' ABI this package uses, declared here so that the
 * package builds without rdma-core's headers and loads the library at run
 * time. Layouts follow <infiniband/verbs.h> (rdma-core, ABI version 1.1);
 * abi_test.go compiles abi_fields.h against the real header and fails if
 * any size or offset below has drifted. Only what is read or written from
 * this side is named; everything else is an opaque type.
 */
#ifndef GOCOLL_IBV_ABI_H
#define GOCOLL_IBV_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

struct ibv_device;
struct ibv_pd;
struct ibv_cq;
struct ibv_srq;
struct ibv_ah;
struct ibv_mw;
struct ibv_mw_bind;
struct ibv_wc;
struct ibv_send_wr;
struct ibv_recv_wr;
struct ibv_qp;

/* The provider's data-path entry points live in the context: ibv_poll_cq,
 * ibv_post_send and friends are inline functions that call through them. */
struct ibv_context_ops {
	void *_slots_a[11];	/* query_device .. dealloc_mw, create_cq */
	int (*poll_cq)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
	int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
	void *_slots_b[7];	/* cq_event .. destroy_srq */
	void *post_srq_recv;
	void *_slots_c[4];	/* create_qp .. destroy_qp */
	int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
	int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
	void *_slots_d[5];	/* create_ah .. async_event */
};

struct ibv_context {
	struct ibv_device *device;
	struct ibv_context_ops ops;
	int cmd_fd;
	int async_fd;
	int num_comp_vectors;
	pthread_mutex_t mutex;
	void *abi_compat;
};

struct ibv_comp_channel {
	struct ibv_context *context;
	int fd;
	int refcnt;
};

struct ibv_device_attr {
	char fw_ver[64];
	uint64_t node_guid;
	uint64_t sys_image_guid;
	uint64_t max_mr_size;
	uint64_t page_size_cap;
	uint32_t vendor_id;
	uint32_t vendor_part_id;
	uint32_t hw_ver;
	int max_qp;
	int max_qp_wr;
	unsigned int device_cap_flags;
	int max_sge;
	int max_sge_rd;
	int max_cq;
	int max_cqe;
	int max_mr;
	int max_pd;
	int max_qp_rd_atom;
	int max_ee_rd_atom;
	int max_res_rd_atom;
	int max_qp_init_rd_atom;
	int max_ee_init_rd_atom;
	int atomic_cap;
	int max_ee;
	int max_rdd;
	int max_mw;
	int max_raw_ipv6_qp;
	int max_raw_ethy_qp;
	int max_mcast_grp;
	int max_mcast_qp_attach;
	int max_total_mcast_qp_attach;
	int max_ah;
	int max_fmr;
	int max_map_per_fmr;
	int max_srq;
	int max_srq_wr;
	int max_srq_sge;
	uint16_t max_pkeys;
	uint8_t local_ca_ack_delay;
	uint8_t phys_port_cnt;
};

struct ibv_port_attr {
	int state;
	int max_mtu;
	int active_mtu;
	int gid_tbl_len;
	uint32_t port_cap_flags;
	uint32_t max_msg_sz;
	uint32_t bad_pkey_cntr;
	uint32_t qkey_viol_cntr;
	uint16_t pkey_tbl_len;
	uint16_t lid;
	uint16_t sm_lid;
	uint8_t lmc;
	uint8_t max_vl_num;
	uint8_t sm_sl;
	uint8_t subnet_timeout;
	uint8_t init_type_reply;
	uint8_t active_width;
	uint8_t active_speed;
	uint8_t phys_state;
	uint8_t link_layer;
	uint8_t flags;
	uint16_t port_cap_flags2;
};

union ibv_gid {
	uint8_t raw[16];
	struct {
		uint64_t subnet_prefix;
		uint64_t interface_id;
	} global;
};

struct ibv_global_route {
	union ibv_gid dgid;
	uint32_t flow_label;
	uint8_t sgid_index;
	uint8_t hop_limit;
	uint8_t traffic_class;
};

struct ibv_ah_attr {
	struct ibv_global_route grh;
	uint16_t dlid;
	uint8_t sl;
	uint8_t src_path_bits;
	uint8_t static_rate;
	uint8_t is_global;
	uint8_t port_num;
};

struct ibv_qp_cap {
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	uint32_t max_inline_data;
};

struct ibv_qp_init_attr {
	void *qp_context;
	struct ibv_cq *send_cq;
	struct ibv_cq *recv_cq;
	struct ibv_srq *srq;
	struct ibv_qp_cap cap;
	int qp_type;
	int sq_sig_all;
};

struct ibv_qp_attr {
	int qp_state;
	int cur_qp_state;
	int path_mtu;
	int path_mig_state;
	uint32_t qkey;
	uint32_t rq_psn;
	uint32_t sq_psn;
	uint32_t dest_qp_num;
	unsigned int qp_access_flags;
	struct ibv_qp_cap cap;
	struct ibv_ah_attr ah_attr;
	struct ibv_ah_attr alt_ah_attr;
	uint16_t pkey_index;
	uint16_t alt_pkey_index;
	uint8_t en_sqd_async_notify;
	uint8_t sq_draining;
	uint8_t max_rd_atomic;
	uint8_t max_dest_rd_atomic;
	uint8_t min_rnr_timer;
	uint8_t port_num;
	uint8_t timeout;
	uint8_t retry_cnt;
	uint8_t rnr_retry;
	uint8_t alt_port_num;
	uint8_t alt_timeout;
	uint32_t rate_limit;
};

struct ibv_qp {
	struct ibv_context *context;
	void *qp_context;
	struct ibv_pd *pd;
	struct ibv_cq *send_cq;
	struct ibv_cq *recv_cq;
	struct ibv_srq *srq;
	uint32_t handle;
	uint32_t qp_num;
	int state;
	int qp_type;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	uint32_t events_completed;
};

struct ibv_mr {
	struct ibv_context *context;
	struct ibv_pd *pd;
	void *addr;
	size_t length;
	uint32_t handle;
	uint32_t lkey;
	uint32_t rkey;
};

struct ibv_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

struct ibv_mw_bind_info {
	struct ibv_mr *mr;
	uint64_t addr;
	uint64_t length;
	unsigned int mw_access_flags;
};

struct ibv_send_wr {
	uint64_t wr_id;
	struct ibv_send_wr *next;
	struct ibv_sge *sg_list;
	int num_sge;
	int opcode;
	unsigned int send_flags;
	uint32_t imm_data; /* network byte order */
	union {
		struct {
			uint64_t remote_addr;
			uint32_t rkey;
		} rdma;
		struct {
			uint64_t remote_addr;
			uint64_t compare_add;
			uint64_t swap;
			uint32_t rkey;
		} atomic;
		struct {
			struct ibv_ah *ah;
			uint32_t remote_qpn;
			uint32_t remote_qkey;
		} ud;
	} wr;
	union {
		struct {
			uint32_t remote_srqn;
		} xrc;
	} qp_type;
	union {
		struct {
			struct ibv_mw *mw;
			uint32_t rkey;
			struct ibv_mw_bind_info bind_info;
		} bind_mw;
		struct {
			void *hdr;
			uint16_t hdr_sz;
			uint16_t mss;
		} tso;
	};
};

struct ibv_recv_wr {
	uint64_t wr_id;
	struct ibv_recv_wr *next;
	struct ibv_sge *sg_list;
	int num_sge;
};

struct ibv_wc {
	uint64_t wr_id;
	int status;
	int opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm_data; /* network byte order */
	uint32_t qp_num;
	uint32_t src_qp;
	unsigned int wc_flags;
	uint16_t pkey_index;
	uint16_t slid;
	uint8_t sl;
	uint8_t dlid_path_bits;
};

/* Enumerators used here, with the values the header gives them. */
enum {
	GC_QPS_RESET = 0, GC_QPS_INIT = 1, GC_QPS_RTR = 2, GC_QPS_RTS = 3,
	GC_QPT_RC = 2,
	GC_PORT_ACTIVE = 4,
	GC_LINK_LAYER_INFINIBAND = 1, GC_LINK_LAYER_ETHERNET = 2,
	GC_ACCESS_LOCAL_WRITE = 1, GC_ACCESS_REMOTE_WRITE = 2,
	GC_WR_RDMA_WRITE = 0, GC_WR_RDMA_WRITE_WITH_IMM = 1, GC_WR_SEND_WITH_IMM = 3,
	GC_SEND_SIGNALED = 2, GC_SEND_INLINE = 8,
	GC_WC_WITH_IMM = 2,
	GC_WC_RECV = 128, GC_WC_RECV_RDMA_WITH_IMM = 129,
	GC_QP_STATE = 1 << 0, GC_QP_ACCESS_FLAGS = 1 << 3, GC_QP_PKEY_INDEX = 1 << 4,
	GC_QP_PORT = 1 << 5, GC_QP_AV = 1 << 7, GC_QP_PATH_MTU = 1 << 8,
	GC_QP_TIMEOUT = 1 << 9, GC_QP_RETRY_CNT = 1 << 10, GC_QP_RNR_RETRY = 1 << 11,
	GC_QP_RQ_PSN = 1 << 12, GC_QP_MAX_QP_RD_ATOMIC = 1 << 13,
	GC_QP_MIN_RNR_TIMER = 1 << 15, GC_QP_SQ_PSN = 1 << 16,
	GC_QP_MAX_DEST_RD_ATOMIC = 1 << 17, GC_QP_DEST_QPN = 1 << 20,
};

#endif

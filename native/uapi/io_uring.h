/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * Trimmed copy of the Linux uapi <linux/io_uring.h>: only what iodl's uring engine uses.
 * Vendored (as fio and liburing do) so that the build works against kernel headers that
 * predate io_uring (5.1) while the running kernel decides at probe time. The layouts are
 * the kernel ABI; the static asserts below guard against a trimming mistake.
 */
#ifndef IODL_UAPI_IO_URING_H
#define IODL_UAPI_IO_URING_H

#include <linux/types.h>

struct io_uring_sqe {
	__u8	opcode;
	__u8	flags;		/* IOSQE_* */
	__u16	ioprio;
	__s32	fd;
	__u64	off;
	__u64	addr;
	__u32	len;
	__u32	rw_flags;
	__u64	user_data;	/* handed back in the cqe */
	__u16	buf_index;	/* registered buffer, for READ_FIXED */
	__u16	personality;
	__s32	splice_fd_in;
	__u64	addr3;
	__u64	__pad2[1];
};

struct io_uring_cqe {
	__u64	user_data;
	__s32	res;		/* bytes or -errno */
	__u32	flags;
};

struct io_sqring_offsets {
	__u32 head, tail, ring_mask, ring_entries, flags, dropped, array, resv1;
	__u64 resv2;
};

struct io_cqring_offsets {
	__u32 head, tail, ring_mask, ring_entries, overflow, cqes, flags, resv1;
	__u64 resv2;
};

struct io_uring_params {
	__u32 sq_entries;
	__u32 cq_entries;
	__u32 flags;
	__u32 sq_thread_cpu;
	__u32 sq_thread_idle;
	__u32 features;
	__u32 wq_fd;
	__u32 resv[3];
	struct io_sqring_offsets sq_off;
	struct io_cqring_offsets cq_off;
};

struct io_uring_probe_op {
	__u8 op;
	__u8 resv;
	__u16 flags;	/* IO_URING_OP_* */
	__u32 resv2;
};

struct io_uring_probe {
	__u8 last_op;	/* last opcode supported */
	__u8 ops_len;	/* length of ops[] array below */
	__u16 resv;
	__u32 resv2[3];
	struct io_uring_probe_op ops[];
};

/* io_uring_setup() flags */
#define IORING_SETUP_CQSIZE		(1U << 3)
#define IORING_SETUP_R_DISABLED		(1U << 6)	/* 5.10 */
#define IORING_SETUP_COOP_TASKRUN	(1U << 8)	/* 5.19 */
#define IORING_SETUP_SINGLE_ISSUER	(1U << 12)	/* 6.0 */
#define IORING_SETUP_DEFER_TASKRUN	(1U << 13)	/* 6.1 */

/* opcodes */
#define IORING_OP_READ_FIXED		4
#define IORING_OP_WRITE_FIXED		5
#define IORING_OP_READ			22		/* 5.6 */
#define IORING_OP_WRITE			23		/* 5.6 */

/* io_uring_enter() flags */
#define IORING_ENTER_GETEVENTS		(1U << 0)
#define IORING_ENTER_EXT_ARG		(1U << 3)	/* 5.11: argp is a struct io_uring_getevents_arg */

/* features */
#define IORING_FEAT_SINGLE_MMAP		(1U << 0)
#define IORING_FEAT_EXT_ARG		(1U << 8)	/* 5.11 */

/* io_uring_enter(..., IORING_ENTER_EXT_ARG, arg, sizeof(arg)): a wait with a timeout */
struct io_uring_getevents_arg {
	__u64 sigmask;
	__u32 sigmask_sz;
	__u32 pad;
	__u64 ts;	/* pointer to a struct __kernel_timespec (two __s64: sec, nsec) */
};

/* mmap offsets */
#define IORING_OFF_SQ_RING		0ULL
#define IORING_OFF_CQ_RING		0x8000000ULL
#define IORING_OFF_SQES			0x10000000ULL

/* io_uring_register() opcodes */
#define IORING_REGISTER_BUFFERS		0
#define IORING_UNREGISTER_BUFFERS	1
#define IORING_REGISTER_PROBE		8
#define IORING_REGISTER_ENABLE_RINGS	12

#define IO_URING_OP_SUPPORTED		(1U << 0)

_Static_assert(sizeof(struct io_uring_sqe) == 64, "io_uring_sqe is 64 bytes");
_Static_assert(sizeof(struct io_uring_cqe) == 16, "io_uring_cqe is 16 bytes");
_Static_assert(sizeof(struct io_uring_params) == 120, "io_uring_params is 120 bytes");
_Static_assert(sizeof(struct io_uring_getevents_arg) == 24, "io_uring_getevents_arg is 24 bytes");

#endif

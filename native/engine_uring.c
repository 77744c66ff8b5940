/*
 * uring: io_uring through raw io_uring_setup/enter/register and mmap of the rings (no liburing;
 * fio engines/io_uring.c and t/io_uring.c). Staged SQEs go to the kernel in one
 * io_uring_enter; completions are reaped from the CQ ring in user space, entering the kernel
 * only to wait, at most IODL_WAIT_SLICE_NS at a time (IORING_ENTER_EXT_ARG, 5.11; before it,
 * by polling). An EAGAIN/EBUSY from io_uring_enter leaves the SQEs in the ring: they are
 * submitted again after the next completions, as fio does. The pool is registered once so
 * requests use READ_FIXED/WRITE_FIXED (no page pinning per I/O); if the kernel refuses
 * (RLIMIT_MEMLOCK before 5.12), plain READ/WRITE are used instead. c->fio_ring and
 * c->register_bufs (engine.h) make the ring and the requests as fio's engine makes them instead.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include "engine.h"
#include "sys.h"

struct uring_data {
	int fd;
	void *sq_ring, *cq_ring;
	size_t sq_ring_sz, cq_ring_sz;
	struct io_uring_sqe *sqes;
	size_t sqes_sz;
	unsigned *sq_head, *sq_tail, *sq_array, sq_mask, sq_entries;
	unsigned *cq_head, *cq_tail, cq_mask;
	struct io_uring_cqe *cqes;
	unsigned tail;			/* our SQ tail, published to *sq_tail at commit */
	unsigned inkernel;		/* submitted and not yet reaped */
	struct iodl_req **staged;
	struct iodl_req **done;
	struct iodl_req **failed;	/* refused by io_uring_enter: handed back as completions */
	unsigned nstaged, nfailed;
	int fixed;
	int ext_arg;			/* waits can carry a timeout (IORING_FEAT_EXT_ARG) */
	int disabled;			/* made R_DISABLED: the first submitting thread enables it */
	unsigned submit_flags;		/* io_uring_enter flags of a submit (fio: GETEVENTS) */
};

static int op_supported(const struct io_uring_probe *p, unsigned op)
{
	return p->last_op >= op && (p->ops[op].flags & IO_URING_OP_SUPPORTED);
}

/* IORING_OP_READ and _WRITE (5.6): the plain ops, used when the pool cannot be registered */
static int rw_supported(int fd)
{
	size_t sz = sizeof(struct io_uring_probe) + 256 * sizeof(struct io_uring_probe_op);
	struct io_uring_probe *p = calloc(1, sz);
	int rc;

	if (!p)
		return -ENOMEM;
	rc = sys_io_uring_register(fd, IORING_REGISTER_PROBE, p, 256);
	/* no probe (before 5.6) means no IORING_OP_READ either */
	if (rc < 0)
		rc = -ENOSYS;
	else if (!op_supported(p, IORING_OP_READ) || !op_supported(p, IORING_OP_WRITE))
		rc = -ENOSYS;
	else
		rc = 0;
	free(p);
	return rc;
}

static int uring_probe(void)
{
	struct io_uring_params p;
	int fd, rc;

	memset(&p, 0, sizeof(p));
	fd = sys_io_uring_setup(2, &p);
	if (fd < 0)
		return fd;
	rc = rw_supported(fd);
	close(fd);
	return rc;
}

static void uring_cleanup(struct iodl_ctx *c)
{
	struct uring_data *d = c->eng;

	if (!d)
		return;
	if (d->sqes)
		munmap(d->sqes, d->sqes_sz);
	if (d->cq_ring && d->cq_ring != d->sq_ring)
		munmap(d->cq_ring, d->cq_ring_sz);
	if (d->sq_ring)
		munmap(d->sq_ring, d->sq_ring_sz);
	if (d->fd >= 0)
		close(d->fd);	/* also drops the registered buffers */
	free(d->staged);
	free(d->done);
	free(d->failed);
	free(d);
	c->eng = NULL;
}

static void *map_ring(int fd, size_t sz, off_t off)
{
	void *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, off);

	return p == MAP_FAILED ? NULL : p;
}

static int uring_setup(struct iodl_ctx *c, struct uring_data *d)
{
	struct io_uring_params p;
	unsigned char *sq, *cq;

	/*
	 * COOP_TASKRUN (5.19): completions wait for our next io_uring_enter, no IPI; older: without.
	 * fio_ring: fio 3.33's flags (engines/io_uring.c fio_ioring_queue_init), each dropped as fio
	 * drops it when the kernel refuses it; R_DISABLED (5.10) so that the issuer is the thread
	 * that runs, not the one that made the engine.
	 */
	static const unsigned fio_flags[] = {
		IORING_SETUP_CQSIZE | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER |
			IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED,
		IORING_SETUP_CQSIZE | IORING_SETUP_COOP_TASKRUN,
		IORING_SETUP_CQSIZE,
		0,
	};
	static const unsigned own_flags[] = { IORING_SETUP_COOP_TASKRUN, 0 };
	const unsigned *flags = c->fio_ring ? fio_flags : own_flags;
	size_t n = c->fio_ring ? sizeof(fio_flags) / sizeof(*fio_flags) : sizeof(own_flags) / sizeof(*own_flags);

	d->fd = -EINVAL;
	for (size_t i = 0; i < n && d->fd == -EINVAL; i++) {
		memset(&p, 0, sizeof(p));
		p.flags = flags[i];
		p.cq_entries = c->depth;
		d->fd = sys_io_uring_setup(c->depth, &p);
	}
	d->disabled = d->fd >= 0 && (p.flags & IORING_SETUP_R_DISABLED);
	d->submit_flags = c->fio_ring ? IORING_ENTER_GETEVENTS : 0;
	if (d->fd < 0) {
		c->failed_syscall = "io_uring_setup";
		return d->fd;
	}
	d->sq_ring_sz = p.sq_off.array + p.sq_entries * sizeof(unsigned);
	d->cq_ring_sz = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	if (p.features & IORING_FEAT_SINGLE_MMAP) {
		if (d->cq_ring_sz > d->sq_ring_sz)
			d->sq_ring_sz = d->cq_ring_sz;
		d->cq_ring_sz = d->sq_ring_sz;
	}
	d->sq_ring = map_ring(d->fd, d->sq_ring_sz, IORING_OFF_SQ_RING);
	if (!d->sq_ring)
		goto mmap_failed;
	d->cq_ring = p.features & IORING_FEAT_SINGLE_MMAP ? d->sq_ring
			: map_ring(d->fd, d->cq_ring_sz, IORING_OFF_CQ_RING);
	if (!d->cq_ring)
		goto mmap_failed;
	d->sqes_sz = p.sq_entries * sizeof(struct io_uring_sqe);
	d->sqes = map_ring(d->fd, d->sqes_sz, IORING_OFF_SQES);
	if (!d->sqes)
		goto mmap_failed;

	sq = d->sq_ring;
	cq = d->cq_ring;
	d->sq_head = (unsigned *)(sq + p.sq_off.head);
	d->sq_tail = (unsigned *)(sq + p.sq_off.tail);
	d->sq_mask = *(unsigned *)(sq + p.sq_off.ring_mask);
	d->sq_entries = *(unsigned *)(sq + p.sq_off.ring_entries);
	d->sq_array = (unsigned *)(sq + p.sq_off.array);
	d->cq_head = (unsigned *)(cq + p.cq_off.head);
	d->cq_tail = (unsigned *)(cq + p.cq_off.tail);
	d->cq_mask = *(unsigned *)(cq + p.cq_off.ring_mask);
	d->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
	/* SQE i always sits in array slot i: the indirection is not needed */
	for (unsigned i = 0; i < d->sq_entries; i++)
		d->sq_array[i] = i;
	d->tail = *d->sq_tail;
	d->ext_arg = !!(p.features & IORING_FEAT_EXT_ARG);
	return 0;

mmap_failed:
	c->failed_syscall = "mmap";
	return -errno;
}

static int uring_init(struct iodl_ctx *c)
{
	struct uring_data *d = calloc(1, sizeof(*d));
	struct iovec *iov;
	int rc;

	if (!d)
		return -ENOMEM;
	d->fd = -1;
	c->eng = d;
	d->staged = calloc(c->depth, sizeof(*d->staged));
	d->done = calloc(c->depth, sizeof(*d->done));
	d->failed = calloc(c->depth, sizeof(*d->failed));
	if (!d->staged || !d->done || !d->failed) {
		uring_cleanup(c);
		return -ENOMEM;
	}
	rc = uring_setup(c, d);
	if (rc < 0) {
		uring_cleanup(c);
		return rc;
	}
	/* fresh: reads never use the pool; !register_bufs: fio's fixedbufs=0, pages pinned per request */
	iov = c->fresh_bufs || !c->register_bufs ? NULL : calloc(c->depth, sizeof(*iov));
	if (iov) {
		for (unsigned i = 0; i < c->depth; i++) {
			iov[i].iov_base = c->pool + (size_t)i * c->slot_size;
			iov[i].iov_len = c->slot_size;
		}
		d->fixed = sys_io_uring_register(d->fd, IORING_REGISTER_BUFFERS, iov, c->depth) == 0;
		c->fixed_bufs = d->fixed;
		free(iov);
	}
	return 0;
}

static enum iodl_q_status uring_queue(struct iodl_ctx *c, struct iodl_req *r)
{
	struct uring_data *d = c->eng;
	struct io_uring_sqe *sqe;

	if (d->tail - __atomic_load_n(d->sq_head, __ATOMIC_ACQUIRE) >= d->sq_entries)
		return IODL_Q_BUSY;
	sqe = &d->sqes[d->tail & d->sq_mask];
	memset(sqe, 0, sizeof(*sqe));
	if (r->op == IODL_OP_WRITE)
		sqe->opcode = d->fixed ? IORING_OP_WRITE_FIXED : IORING_OP_WRITE;
	else
		sqe->opcode = d->fixed ? IORING_OP_READ_FIXED : IORING_OP_READ;
	sqe->fd = r->fd;
	sqe->off = r->offset;
	sqe->addr = (uint64_t)(uintptr_t)r->buf;
	sqe->len = (uint32_t)r->len;
	sqe->buf_index = (uint16_t)r->slot;	/* r->buf lies inside the slot's registered buffer */
	sqe->user_data = (uint64_t)(uintptr_t)r;
	d->tail++;
	d->staged[d->nstaged++] = r;
	return IODL_Q_QUEUED;
}

static int uring_commit(struct iodl_ctx *c)
{
	struct uring_data *d = c->eng;
	unsigned submitted = 0;

	__atomic_store_n(d->sq_tail, d->tail, __ATOMIC_RELEASE);
	while (submitted < d->nstaged) {
		int rc = 0;

		/* SINGLE_ISSUER: the thread that enables the ring is its issuer (this run's); a refusal
		 * fails the staged requests as a refused submit does */
		if (d->disabled) {
			rc = sys_io_uring_register(d->fd, IORING_REGISTER_ENABLE_RINGS, NULL, 0);
			d->disabled = rc < 0;
		}
		if (rc == 0)
			rc = sys_io_uring_enter(d->fd, d->nstaged - submitted, 0, d->submit_flags);

		if (rc > 0) {
			if (c->stamp_issued) {
				/* the kernel takes SQEs in ring order: these are staged[submitted, +rc) */
				uint64_t now = iodl_now_ns();

				for (unsigned k = submitted; k < submitted + (unsigned)rc; k++)
					d->staged[k]->t_issued_ns = now;
			}
			submitted += (unsigned)rc;	/* a bad SQE is consumed too: its error is a CQE */
			d->inkernel += (unsigned)rc;
			continue;
		}
		if (rc == -EINTR)
			continue;
		if (rc == -EAGAIN || rc == -EBUSY || rc == 0) {
			/* no room in the kernel now: the rest stay in the SQ ring for after a reap */
			memmove(d->staged, d->staged + submitted, (d->nstaged - submitted) * sizeof(*d->staged));
			d->nstaged -= submitted;
			return 0;
		}
		/*
		 * Refused outright: take the unconsumed SQEs back (the kernel reads the tail only
		 * inside io_uring_enter, and we have no SQ thread) and fail their requests.
		 */
		d->tail -= d->nstaged - submitted;
		__atomic_store_n(d->sq_tail, d->tail, __ATOMIC_RELEASE);
		for (unsigned i = submitted; i < d->nstaged; i++) {
			d->staged[i]->res = rc;
			d->failed[d->nfailed++] = d->staged[i];
		}
		break;
	}
	d->nstaged = 0;
	return 0;
}

/* Wait for `min` completions, at most IODL_WAIT_SLICE_NS: 0, or -errno other than a timeout. */
static int uring_wait(struct uring_data *d, unsigned min)
{
	struct iodl_kts slice = iodl_kts(IODL_WAIT_SLICE_NS);
	uint64_t until;
	int rc;

	if (d->ext_arg) {
		rc = sys_io_uring_wait(d->fd, min, &slice);
		return rc == -ETIME || rc > 0 ? 0 : rc;
	}
	/* before 5.11 a wait cannot time out: poll in 1 ms steps instead */
	until = iodl_now_ns() + IODL_WAIT_SLICE_NS;
	do {
		rc = sys_io_uring_enter(d->fd, 0, 0, IORING_ENTER_GETEVENTS);
		if (rc < 0)
			return rc;
		if (__atomic_load_n(d->cq_tail, __ATOMIC_ACQUIRE) - *d->cq_head >= min)
			return 0;
		iodl_sleep_until(iodl_now_ns() + 1000000);
	} while (iodl_now_ns() < until);
	return 0;
}

static int uring_getevents(struct iodl_ctx *c, unsigned min, unsigned max)
{
	struct uring_data *d = c->eng;
	unsigned n = 0, head, tail;

	if (d->nstaged)
		uring_commit(c);	/* what EAGAIN left in the ring, now that completions may have made room */
	while (d->nfailed && n < max)
		d->done[n++] = d->failed[--d->nfailed];
	if (n >= min)
		return (int)n;
	if (!d->inkernel) {
		/* all we hold is refused by EAGAIN with nothing of ours in the kernel: wait a little */
		iodl_sleep_until(iodl_now_ns() + 1000000);
		return (int)n;
	}
	if (min - n > d->inkernel)
		min = n + d->inkernel;
	head = *d->cq_head;
	tail = __atomic_load_n(d->cq_tail, __ATOMIC_ACQUIRE);
	if (tail - head < min - n) {
		int rc = uring_wait(d, min - n);

		if (rc < 0 && !n) {
			if (rc != -EINTR)
				c->failed_syscall = "io_uring_enter";
			return rc;
		}
		tail = __atomic_load_n(d->cq_tail, __ATOMIC_ACQUIRE);
	}
	while (head != tail && n < max) {
		struct io_uring_cqe *cqe = &d->cqes[head & d->cq_mask];
		struct iodl_req *r = (struct iodl_req *)(uintptr_t)cqe->user_data;

		r->res = cqe->res;
		d->done[n++] = r;
		head++;
		d->inkernel--;
	}
	__atomic_store_n(d->cq_head, head, __ATOMIC_RELEASE);
	return (int)n;
}

static unsigned uring_ready(struct iodl_ctx *c)
{
	struct uring_data *d = c->eng;

	return d->nfailed + (__atomic_load_n(d->cq_tail, __ATOMIC_ACQUIRE) - *d->cq_head);
}

static struct iodl_req *uring_event(struct iodl_ctx *c, unsigned i)
{
	return ((struct uring_data *)c->eng)->done[i];
}

const struct iodl_engine_ops iodl_engine_uring = {
	.name = "uring",
	.version = IODL_OPS_VERSION,
	.flags = IODL_ENG_FIXED_BUFS,
	.probe = uring_probe,
	.init = uring_init,
	.queue = uring_queue,
	.commit = uring_commit,
	.getevents = uring_getevents,
	.ready = uring_ready,
	.event = uring_event,
	.cleanup = uring_cleanup,
};

/*
 * aio: Linux native AIO through raw io_setup/io_submit/io_getevents (no libaio). Staged iocbs
 * go to the kernel in one io_submit; completions are reaped from the mmapped completion ring
 * in user space when enough are already there (fio libaio userspace_reap), io_getevents only
 * when we must wait, at most IODL_WAIT_SLICE_NS at a time. iodl's own runs keep that default:
 * it saves a syscall per reap, and no other tool's work is to be matched there. fio's libaio
 * reaps with io_getevents every time unless a job sets userspace_reap and
 * iodepth_batch_complete_min=0: c->syscall_reap makes us do the same, so that fio-compare
 * measures both tools doing the same work (at 4 KiB on a RAM-backed device a syscall per
 * request is a visible share of each one's cost). Buffered AIO reads and writes are
 * synchronous inside io_submit (a kernel fact). io_submit's EAGAIN (no room in the kernel now) keeps the
 * iocbs staged: they are submitted again after the next completions, as fio does.
 */
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "sys.h"

/* The completion ring the kernel maps at the context address (fs/aio.c, not in uapi). */
struct aio_ring {
	unsigned id, nr, head, tail;
	unsigned magic, compat_features, incompat_features, header_length;
	struct io_event io_events[];
};
#define AIO_RING_MAGIC 0xa10a10a1

struct aio_data {
	aio_context_t ctx;
	struct iocb *iocbs;		/* one per pool slot */
	struct iocb **staged;		/* [0, nstaged): not yet taken by the kernel */
	struct io_event *events;
	struct iodl_req **done;		/* what the last getevents returned */
	struct iodl_req **failed;	/* refused by io_submit: handed back as completions */
	unsigned nstaged, nfailed;
	unsigned inkernel;		/* submitted and not yet reaped */
};

static int aio_probe(void)
{
	aio_context_t ctx = 0;
	int rc = sys_io_setup(1, &ctx);

	if (rc < 0)
		return rc;
	sys_io_destroy(ctx);
	return 0;
}

static void aio_cleanup(struct iodl_ctx *c)
{
	struct aio_data *d = c->eng;

	if (!d)
		return;
	if (d->ctx)
		sys_io_destroy(d->ctx);	/* waits for anything still in flight: the pool stays valid */
	free(d->iocbs);
	free(d->staged);
	free(d->events);
	free(d->done);
	free(d->failed);
	free(d);
	c->eng = NULL;
}

static int aio_init(struct iodl_ctx *c)
{
	struct aio_data *d = calloc(1, sizeof(*d));
	int rc;

	if (!d)
		return -ENOMEM;
	c->eng = d;
	d->iocbs = calloc(c->depth, sizeof(*d->iocbs));
	d->staged = calloc(c->depth, sizeof(*d->staged));
	d->events = calloc(c->depth, sizeof(*d->events));
	d->done = calloc(c->depth, sizeof(*d->done));
	d->failed = calloc(c->depth, sizeof(*d->failed));
	if (!d->iocbs || !d->staged || !d->events || !d->done || !d->failed) {
		aio_cleanup(c);
		return -ENOMEM;
	}
	rc = sys_io_setup(c->depth, &d->ctx);
	if (rc < 0) {
		d->ctx = 0;
		c->failed_syscall = "io_setup";
		aio_cleanup(c);
		return rc;
	}
	return 0;
}

static enum iodl_q_status aio_queue(struct iodl_ctx *c, struct iodl_req *r)
{
	struct aio_data *d = c->eng;
	struct iocb *cb = &d->iocbs[r->slot];

	memset(cb, 0, sizeof(*cb));
	cb->aio_lio_opcode = r->op == IODL_OP_WRITE ? IOCB_CMD_PWRITE : IOCB_CMD_PREAD;
	cb->aio_fildes = (uint32_t)r->fd;
	cb->aio_buf = (uint64_t)(uintptr_t)r->buf;
	cb->aio_nbytes = r->len;
	cb->aio_offset = (int64_t)r->offset;
	cb->aio_data = (uint64_t)(uintptr_t)r;
	d->staged[d->nstaged++] = cb;
	return IODL_Q_QUEUED;
}

static int aio_commit(struct iodl_ctx *c)
{
	struct aio_data *d = c->eng;
	unsigned i = 0;

	while (i < d->nstaged) {
		int rc = sys_io_submit(d->ctx, d->nstaged - i, &d->staged[i]);

		if (rc > 0) {
			if (c->stamp_issued) {
				/* every request this call took shares its return time (fio libaio_queued) */
				uint64_t now = iodl_now_ns();

				for (unsigned k = i; k < i + (unsigned)rc; k++)
					((struct iodl_req *)(uintptr_t)d->staged[k]->aio_data)->t_issued_ns = now;
			}
			i += (unsigned)rc;
			d->inkernel += (unsigned)rc;
			continue;
		}
		if (rc == -EINTR)
			continue;
		if (rc == -EAGAIN || rc == 0)
			break;	/* the kernel has no room now: keep the rest for after a reap */
		/* io_submit refuses the first iocb it cannot take (bad fd, EINVAL...): fail that one */
		struct iodl_req *r = (struct iodl_req *)(uintptr_t)d->staged[i]->aio_data;

		r->res = rc;
		d->failed[d->nfailed++] = r;
		i++;
	}
	memmove(d->staged, d->staged + i, (d->nstaged - i) * sizeof(*d->staged));
	d->nstaged -= i;
	return 0;
}

static int aio_getevents(struct iodl_ctx *c, unsigned min, unsigned max)
{
	struct aio_data *d = c->eng;
	struct aio_ring *ring = (struct aio_ring *)(uintptr_t)d->ctx;
	unsigned n = 0;
	int rc;

	if (d->nstaged)
		aio_commit(c);	/* what EAGAIN left staged, now that completions may have made room */
	while (d->nfailed && n < max)
		d->done[n++] = d->failed[--d->nfailed];
	if (n >= min)
		return (int)n;
	min -= n;
	max -= n;
	if (!d->inkernel) {
		/* all we hold is refused by EAGAIN with nothing of ours in the kernel: wait a little */
		iodl_sleep_until(iodl_now_ns() + 1000000);
		return (int)n;
	}
	if (min > d->inkernel)
		min = d->inkernel;

	if (!c->syscall_reap && ring->magic == AIO_RING_MAGIC && !ring->incompat_features) {
		unsigned head = ring->head, nr = ring->nr;
		unsigned tail = __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE);
		unsigned avail = tail >= head ? tail - head : nr - head + tail;

		if (avail >= min) {	/* already there: no syscall */
			for (unsigned k = avail < max ? avail : max; k; k--) {
				struct io_event *ev = &ring->io_events[head];
				struct iodl_req *r = (struct iodl_req *)(uintptr_t)ev->data;

				r->res = ev->res;
				d->done[n++] = r;
				head = head + 1 == nr ? 0 : head + 1;
			}
			__atomic_store_n(&ring->head, head, __ATOMIC_RELEASE);
			d->inkernel -= avail < max ? avail : max;
			return (int)n;
		}
	}
	struct iodl_kts slice = iodl_kts(IODL_WAIT_SLICE_NS);

	rc = sys_io_getevents(d->ctx, min, max, d->events, &slice);
	if (rc < 0) {
		if (n || rc == -EINTR)
			return (int)n ? (int)n : rc;
		c->failed_syscall = "io_getevents";
		return rc;
	}
	d->inkernel -= (unsigned)rc;
	for (int i = 0; i < rc; i++) {
		struct iodl_req *r = (struct iodl_req *)(uintptr_t)d->events[i].data;

		r->res = d->events[i].res;
		d->done[n++] = r;
	}
	return (int)n;
}

static unsigned aio_ready(struct iodl_ctx *c)
{
	struct aio_data *d = c->eng;
	struct aio_ring *ring = (struct aio_ring *)(uintptr_t)d->ctx;

	if (c->syscall_reap || ring->magic != AIO_RING_MAGIC || ring->incompat_features)
		return d->nfailed;	/* only io_getevents would tell */
	unsigned head = ring->head, tail = __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE);

	return d->nfailed + (tail >= head ? tail - head : ring->nr - head + tail);
}

static struct iodl_req *aio_event(struct iodl_ctx *c, unsigned i)
{
	return ((struct aio_data *)c->eng)->done[i];
}

const struct iodl_engine_ops iodl_engine_aio = {
	.name = "aio",
	.version = IODL_OPS_VERSION,
	.flags = 0,
	.probe = aio_probe,
	.init = aio_init,
	.queue = aio_queue,
	.commit = aio_commit,
	.getevents = aio_getevents,
	.ready = aio_ready,
	.event = aio_event,
	.cleanup = aio_cleanup,
};

/*
 * null: no I/O. A request, read or write, "returns" its full length delay_ns after it was submitted; waiting
 * for it sleeps (clock_nanosleep), never spins, so that many null ranks on few cores behave.
 * Lets coordination, pacing and reports be tested without storage.
 *
 * With a device (c->device, a "busy until" word shared by engines in several threads or
 * processes) requests are served one at a time across all of them: each reserves the next
 * delay_ns of the device when it is submitted and completes at the end of its reservation.
 * That is a FIFO queue in front of one server, so a shared storage bottleneck (ranks of a
 * node contending for one device) can be tested without one.
 */
#include <stdlib.h>

#include "engine.h"
#include "sys.h"

struct null_data {
	struct iodl_req **fifo;		/* submit order = due order: see null_commit() */
	struct iodl_req **events;
	unsigned head, count, staged;	/* fifo: [head, head+count) submitted, then `staged` more */
};

static int null_probe(void)
{
	return 0;
}

static int null_init(struct iodl_ctx *c)
{
	struct null_data *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	d->fifo = calloc(c->depth, sizeof(*d->fifo));
	d->events = calloc(c->depth, sizeof(*d->events));
	if (!d->fifo || !d->events) {
		free(d->fifo);
		free(d->events);
		free(d);
		return -ENOMEM;
	}
	c->eng = d;
	return 0;
}

static enum iodl_q_status null_queue(struct iodl_ctx *c, struct iodl_req *r)
{
	struct null_data *d = c->eng;

	if (d->count + d->staged == c->depth)
		return IODL_Q_BUSY;
	d->fifo[(d->head + d->count + d->staged++) % c->depth] = r;
	return IODL_Q_QUEUED;
}

/* Reserve [start, start + d) of the shared device, start = max(now, busy until); its end. */
static uint64_t device_reserve(uint64_t *busy, uint64_t now, uint64_t d)
{
	uint64_t old = __atomic_load_n(busy, __ATOMIC_RELAXED), start;

	/* the word is all that is shared, so relaxed ordering is enough; a lost race retries */
	do
		start = old > now ? old : now;
	while (!__atomic_compare_exchange_n(busy, &old, start + d, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	return start + d;
}

static int null_commit(struct iodl_ctx *c)
{
	struct null_data *d = c->eng;

	/*
	 * Due times never decrease along the fifo: without a device every request has the same
	 * delay from a later (or equal) submit; with one, each reservation starts no earlier
	 * than the end of the one before it, ours included.
	 */
	for (unsigned i = 0; i < d->staged; i++) {
		struct iodl_req *r = d->fifo[(d->head + d->count + i) % c->depth];

		r->t_due_ns = c->device ? device_reserve(c->device, r->t_submit_ns, c->delay_ns)
					: r->t_submit_ns + c->delay_ns;
	}
	if (c->stamp_issued) {
		/* "submitted" once the due times are set, as aio's io_submit returning: so slat is
		 * this loop and clat the delay (less that loop), which is what the tests rely on */
		uint64_t now = iodl_now_ns();

		for (unsigned i = 0; i < d->staged; i++)
			d->fifo[(d->head + d->count + i) % c->depth]->t_issued_ns = now;
	}
	d->count += d->staged;
	d->staged = 0;
	return 0;
}

static int null_getevents(struct iodl_ctx *c, unsigned min, unsigned max)
{
	struct null_data *d = c->eng;
	/* a device shared with a slower engine can hold us up even when our own delay is 0 */
	int timed = c->delay_ns || c->device;
	unsigned n = 0;

	if (min > d->count)
		min = d->count;
	if (min && timed) {
		/* at most 100 ms per call: the core looks for signals between calls */
		uint64_t until = d->fifo[(d->head + min - 1) % c->depth]->t_due_ns;
		uint64_t slice = iodl_now_ns() + 100000000ull;
		int rc = iodl_sleep_until(until < slice ? until : slice);

		if (rc < 0)
			return rc;
	}
	uint64_t now = timed ? iodl_now_ns() : 0;
	while (n < max && n < d->count) {
		struct iodl_req *r = d->fifo[(d->head + n) % c->depth];

		if (timed && r->t_due_ns > now)
			break;
		r->res = (int64_t)r->len;
		d->events[n++] = r;
	}
	d->head = (d->head + n) % c->depth;
	d->count -= n;
	return (int)n;
}

static struct iodl_req *null_event(struct iodl_ctx *c, unsigned i)
{
	return ((struct null_data *)c->eng)->events[i];
}

static void null_cleanup(struct iodl_ctx *c)
{
	struct null_data *d = c->eng;

	if (d) {
		free(d->fifo);
		free(d->events);
		free(d);
	}
}

const struct iodl_engine_ops iodl_engine_null = {
	.name = "null",
	.version = IODL_OPS_VERSION,
	.flags = IODL_ENG_FAKE,
	.probe = null_probe,
	.init = null_init,
	.queue = null_queue,
	.commit = null_commit,
	.getevents = null_getevents,
	.event = null_event,
	.cleanup = null_cleanup,
};

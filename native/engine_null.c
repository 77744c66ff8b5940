/*
 * null: no I/O. A request "returns" its full length delay_ns after it was submitted; waiting
 * for it sleeps (clock_nanosleep), never spins, so that many null ranks on few cores behave.
 * Lets coordination, pacing and reports be tested without storage.
 */
#include <stdlib.h>

#include "engine.h"
#include "sys.h"

struct null_data {
	struct iodl_req **fifo;		/* submit order = due order: every request has the same delay */
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

static int null_commit(struct iodl_ctx *c)
{
	struct null_data *d = c->eng;

	d->count += d->staged;
	d->staged = 0;
	return 0;
}

static uint64_t due(const struct iodl_ctx *c, const struct iodl_req *r)
{
	return r->t_submit_ns + c->delay_ns;
}

static int null_getevents(struct iodl_ctx *c, unsigned min, unsigned max)
{
	struct null_data *d = c->eng;
	unsigned n = 0;

	if (min > d->count)
		min = d->count;
	if (min && c->delay_ns) {
		/* at most 100 ms per call: the core looks for signals between calls */
		uint64_t until = due(c, d->fifo[(d->head + min - 1) % c->depth]);
		uint64_t slice = iodl_now_ns() + 100000000ull;
		int rc = iodl_sleep_until(until < slice ? until : slice);

		if (rc < 0)
			return rc;
	}
	uint64_t now = c->delay_ns ? iodl_now_ns() : 0;
	while (n < max && n < d->count) {
		struct iodl_req *r = d->fifo[(d->head + n) % c->depth];

		if (c->delay_ns && due(c, r) > now)
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

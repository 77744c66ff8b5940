/* psync: one pread or pwrite at a time, completed inside ->queue() (fio engines/sync.c). */
#include <unistd.h>

#include "engine.h"
#include "sys.h"

static int psync_probe(void)
{
	return 0;
}

static int psync_init(struct iodl_ctx *c)
{
	return 0;
}

static enum iodl_q_status psync_queue(struct iodl_ctx *c, struct iodl_req *r)
{
	ssize_t n;

	do
		n = r->op == IODL_OP_WRITE ? pwrite(r->fd, r->buf, r->len, (off_t)r->offset)
					   : pread(r->fd, r->buf, r->len, (off_t)r->offset);
	while (n < 0 && errno == EINTR);
	r->res = n < 0 ? -errno : n;
	return IODL_Q_COMPLETED;
}

static void psync_cleanup(struct iodl_ctx *c)
{
}

const struct iodl_engine_ops iodl_engine_psync = {
	.name = "psync",
	.version = IODL_OPS_VERSION,
	.flags = IODL_ENG_SYNC,
	.probe = psync_probe,
	.init = psync_init,
	.queue = psync_queue,
	.cleanup = psync_cleanup,
};

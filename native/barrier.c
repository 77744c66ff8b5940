/*
 * A barrier for the ranks of one node that waits in the kernel (futex on a shared page)
 * instead of polling MPI. 72 ranks on 2 cores polling every millisecond cost more than a
 * core and ~100 ms a step; blocked in FUTEX_WAIT they cost nothing and wake together.
 * Each round also ORs a small flag word over the ranks (train-sync agrees on stopping).
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

static long futex(uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

int iodl_barrier_arrive(struct iodl_node_barrier *b, uint32_t nranks, uint32_t flag, uint32_t *gen)
{
	/* The generation cannot move before we arrive: the round needs us to complete. */
	*gen = __atomic_load_n(&b->generation, __ATOMIC_ACQUIRE);
	__atomic_fetch_or(&b->flags, flag, __ATOMIC_ACQ_REL);
	if (__atomic_add_fetch(&b->arrived, 1, __ATOMIC_ACQ_REL) < nranks)
		return 0;
	/* last to arrive: publish, reset for the next round, then release (in that order) */
	__atomic_store_n(&b->result, __atomic_exchange_n(&b->flags, 0, __ATOMIC_ACQ_REL), __ATOMIC_RELEASE);
	__atomic_store_n(&b->arrived, 0, __ATOMIC_RELEASE);
	__atomic_add_fetch(&b->generation, 1, __ATOMIC_RELEASE);
	futex(&b->generation, FUTEX_WAKE, INT_MAX, NULL);	/* shared, not _PRIVATE: other processes */
	return 1;
}

int iodl_barrier_wait(struct iodl_node_barrier *b, uint32_t gen, uint64_t timeout_ns)
{
	struct timespec ts = { .tv_sec = (time_t)(timeout_ns / 1000000000u),
			       .tv_nsec = (long)(timeout_ns % 1000000000u) };

	while (__atomic_load_n(&b->generation, __ATOMIC_ACQUIRE) == gen) {
		if (futex(&b->generation, FUTEX_WAIT, gen, &ts) < 0) {
			if (errno == ETIMEDOUT)
				return 0;
			if (errno == EINTR)
				return -EINTR;
			/* EAGAIN: the word changed before we slept; look again */
		}
	}
	return 1;
}

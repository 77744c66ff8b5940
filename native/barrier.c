/*
 * A barrier for the ranks of one node that waits in the kernel (futex on a shared page)
 * instead of polling MPI. 72 ranks on 2 cores polling every millisecond cost more than a
 * core and ~100 ms a step; blocked in FUTEX_WAIT they cost nothing and wake together.
 * Each round also ORs a small flag word over the ranks (train-sync agrees on stopping).
 *
 * A rank may arrive with the end of its compute (until_ns): the round is released once every rank
 * arrived and the latest end passed, the last to arrive sleeping for it. A step loop then sleeps
 * once a step (to the release), where a compute sleep followed by the barrier woke it twice; each
 * wake-up costs tens of microseconds of CPU when tens of ranks share two cores.
 *
 * A release wakes every rank of the node at once, and on a node with fewer cores than ranks the
 * last one back at work is late by all the CPU the others use meanwhile. `waking` counts the
 * ranks not yet back at work (each says so, iodl_barrier_resumed); work that can wait (a reader
 * thread ahead of its step loop) waits for it to reach 0 (iodl_barrier_quiet_wait).
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "sys.h"

static long futex(uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

int iodl_barrier_arrive(struct iodl_node_barrier *b, uint32_t nranks, uint32_t flag, uint64_t until_ns,
			uint32_t *gen, uint64_t *latest_ns)
{
	uint64_t seen = __atomic_load_n(&b->until_ns, __ATOMIC_ACQUIRE);

	/* The generation cannot move before we arrive: the round needs us to complete. */
	*gen = __atomic_load_n(&b->generation, __ATOMIC_ACQUIRE);
	__atomic_fetch_or(&b->flags, flag, __ATOMIC_ACQ_REL);
	while (until_ns > seen && !__atomic_compare_exchange_n(&b->until_ns, &seen, until_ns, 0, __ATOMIC_ACQ_REL,
							      __ATOMIC_ACQUIRE))
		;
	if (__atomic_add_fetch(&b->arrived, 1, __ATOMIC_ACQ_REL) < nranks)
		return 0;
	/* last to arrive: every compute end is in; the round is released once the latest has passed */
	*latest_ns = __atomic_exchange_n(&b->until_ns, 0, __ATOMIC_ACQ_REL);
	return 1;
}

void iodl_barrier_release(struct iodl_node_barrier *b, uint32_t nranks)
{
	/* publish, reset for the next round, then release (in that order) */
	__atomic_store_n(&b->result, __atomic_exchange_n(&b->flags, 0, __ATOMIC_ACQ_REL), __ATOMIC_RELEASE);
	__atomic_store_n(&b->arrived, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&b->waking, nranks, __ATOMIC_RELEASE);	/* before anyone can leave */
	__atomic_add_fetch(&b->generation, 1, __ATOMIC_RELEASE);
	futex(&b->generation, FUTEX_WAKE, INT_MAX, NULL);	/* shared, not _PRIVATE: other processes */
}

int iodl_barrier_sleep(uint64_t until_ns, uint64_t timeout_ns)
{
	uint64_t now = iodl_now_ns(), to = until_ns;
	struct timespec ts;
	int rc;

	if (now >= until_ns)
		return 1;
	if (until_ns - now > timeout_ns)
		to = now + timeout_ns;
	ts.tv_sec = (time_t)(to / 1000000000u);
	ts.tv_nsec = (long)(to % 1000000000u);
	rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	if (rc == EINTR)
		return -EINTR;
	return to == until_ns;
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

/* FUTEX_WAIT on word while it holds val, until deadline: 0 woken or changed, -ETIMEDOUT, -EINTR */
static int wait_until(uint32_t *word, uint32_t val, uint64_t deadline)
{
	uint64_t now = iodl_now_ns();
	struct timespec ts;

	if (now >= deadline)
		return -ETIMEDOUT;
	ts.tv_sec = (time_t)((deadline - now) / 1000000000u);
	ts.tv_nsec = (long)((deadline - now) % 1000000000u);
	if (futex(word, FUTEX_WAIT, val, &ts) < 0 && errno != EAGAIN)
		return -errno;
	return 0;
}

int iodl_barrier_resumed(struct iodl_node_barrier *b, uint64_t wait_ns)
{
	uint32_t left = __atomic_load_n(&b->waking, __ATOMIC_ACQUIRE);

	/* never below 0: said before the first release, or after the round's count reached 0, it changes nothing
	 * (each rank says it once a step: twice in a round would count a rank still waking as back) */
	while (left && !__atomic_compare_exchange_n(&b->waking, &left, left - 1, 0, __ATOMIC_ACQ_REL,
						    __ATOMIC_ACQUIRE))
		;
	if (left <= 1) {
		if (left == 1)
			futex(&b->waking, FUTEX_WAKE, INT_MAX, NULL);
		return 1;
	}
	if (!wait_ns)
		return 0;
	/* this round's others only: the next round cannot begin before this rank arrives */
	uint64_t deadline = iodl_now_ns() + wait_ns;

	while ((left = __atomic_load_n(&b->waking, __ATOMIC_ACQUIRE)) != 0)
		if (wait_until(&b->waking, left, deadline) < 0)
			return 0;
	return 1;
}

int iodl_barrier_quiet_wait(struct iodl_node_barrier *b, uint64_t timeout_ns)
{
	uint64_t deadline = iodl_now_ns() + timeout_ns;
	/* the generation first: a release between the two loads shows as waking raised */
	uint32_t gen = __atomic_load_n(&b->generation, __ATOMIC_ACQUIRE), left;
	/* everyone at work now: what we wait for begins with the next release */
	int next = __atomic_load_n(&b->waking, __ATOMIC_ACQUIRE) == 0;
	int rc;

	/* Only waking is waited on, never the generation: a release wakes the step loops alone, and
	 * this waiter sleeps on (the word went 0 -> N unwoken) until the last of them is back. */
	while ((left = __atomic_load_n(&b->waking, __ATOMIC_ACQUIRE)) != 0 ||
	       (next && __atomic_load_n(&b->generation, __ATOMIC_ACQUIRE) == gen))
		if ((rc = wait_until(&b->waking, left, deadline)) < 0)
			return rc == -ETIMEDOUT ? 0 : rc;
	return 1;
}

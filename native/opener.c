/*
 * The open-ahead pool: a rank's dataset files opened on a few threads, in the order the reader
 * asked for them, ahead of the batch that reads them (a data loader's workers open its next
 * files while the current ones are read). It replaces a Python ThreadPoolExecutor whose future
 * per open, GIL hand-off per result and Python per file cost more CPU than the opens themselves
 * on one-sample-per-file datasets (bench/results/emu-cost.md): here a batch is one submit and
 * one take, and the reader waits with the GIL released.
 *
 * Each open makes the checks of iodl/engine.py open_for_read, in the same order: O_NONBLOCK (a
 * FIFO in a file's place must not hang the open), O_NOFOLLOW when a dataset root is given and a
 * link then followed only if it resolves inside the root, fstat through the descriptor (a
 * regular file of at least the bytes the dataset promises), then O_NONBLOCK cleared (one F_SETFL
 * with the status flags we opened with: no F_GETFL to ask them first). A refusal is
 * recorded, not worded: the caller re-runs open_for_read on that path, which raises the one-line
 * error (one place says what each refusal means).
 */
#define _GNU_SOURCE	/* O_DIRECT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "opener.h"
#include "sys.h"

enum { QUEUED, RUNNING, DONE };

/*
 * How many threads a queue of opens wakes. The threads are there for opens that wait (a network or
 * parallel filesystem's: milliseconds each); opens that the dentry and inode caches answer (5-20 us)
 * one thread finishes sooner than several threads' wake-ups and lock hand-offs would (on 2 cores at
 * 16 ranks, eight threads woken for each batch cost each sample more CPU than its open). So the pool
 * keeps its opens' mean time and wakes one thread per SHARE_NS of queued work: at least one, at most
 * all; all until an open has been timed. A thread that finds the queue longer than the busy ones
 * can do at that rate wakes one more, so a pool whose opens turn slow is soon all at work.
 */
#define SHARE_NS 250000ull
/*
 * Opens faster than this on the mean (the dentry and inode caches') wake no thread at all: the
 * caller's take() runs them in order as it needs them. A thread's wake-up costs more CPU than
 * such an open (30-60 us of the woken thread's on a 2-core VM, the open 5-10 us), and a reader
 * that is ahead of its steps loses nothing by opening them itself. Slower opens (a network
 * filesystem's round trip) go to the threads as before; the first batch, untimed, wakes them all.
 */
#define FAST_NS 50000ull

struct request {
	char *path;
	int64_t size;
	struct iodl_open_result res;
	unsigned char state, taken, dropped;
};

struct iodl_opener {
	pthread_mutex_t mu;
	pthread_cond_t work;		/* a request was queued, or the pool stops */
	pthread_cond_t done;		/* an open finished */
	struct request *q;		/* live requests, q[0] is ticket `first`, in ticket order */
	size_t len, cap, next;		/* next: index of the first request no thread has started */
	int64_t first;
	int direct, stopping;
	unsigned refs;			/* the owner and each thread: the last one frees the pool */
	unsigned threads;
	unsigned busy;			/* threads not waiting for work */
	uint64_t mean_ns;		/* the opens' mean time (0: none timed yet), see SHARE_NS */
	int64_t want;			/* the ticket take() waits for (-1: none): only its open wakes it */
	char *inside;			/* the dataset's real root, or NULL */
};

/* realpath `real` inside the root (os.path.commonpath([inside, real]) == inside) */
static int inside_root(const char *inside, const char *real)
{
	size_t n = strlen(inside);

	if (n == 1 && inside[0] == '/')
		return 1;
	return !strncmp(real, inside, n) && (real[n] == '/' || real[n] == '\0');
}

/* one open with open_for_read's checks; the fd (*st its fstat), or -1 with *err set */
static int open_checked(const char *path, int64_t size, int direct, const char *inside, int *err,
			struct stat *st)
{
	int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | (direct ? O_DIRECT : 0);
	int fd;

	fd = open(path, flags | (inside ? O_NOFOLLOW : 0));
	if (fd < 0 && inside && errno == ELOOP) {
		char *real = realpath(path, NULL);

		if (!real) {
			*err = errno;
			return -1;
		}
		if (!inside_root(inside, real)) {
			free(real);
			*err = IODL_OPEN_REFUSED;
			return -1;
		}
		free(real);
		fd = open(path, flags);
	}
	if (fd < 0) {
		*err = errno;
		return -1;
	}
	if (fstat(fd, st) < 0) {
		*err = errno;
		close(fd);
		return -1;
	}
	if (!S_ISREG(st->st_mode) || st->st_size < size) {
		*err = IODL_OPEN_REFUSED;
		close(fd);
		return -1;
	}
	/* F_SETFL sets the status flags alone (access mode and O_CLOEXEC are not among them) */
	if (fcntl(fd, F_SETFL, direct ? O_DIRECT : 0) < 0) {
		*err = errno;
		close(fd);
		return -1;
	}
	*err = 0;
	return fd;
}

static void destroy(struct iodl_opener *op)
{
	for (size_t i = 0; i < op->len; i++)
		free(op->q[i].path);
	free(op->q);
	free(op->inside);
	pthread_mutex_destroy(&op->mu);
	pthread_cond_destroy(&op->work);
	pthread_cond_destroy(&op->done);
	free(op);
}

/* drop the requests at the front that nobody will ask for again (taken, or dropped and closed) */
static void retire(struct iodl_opener *op)
{
	size_t k = 0;

	while (k < op->len && op->q[k].state == DONE && (op->q[k].taken || op->q[k].dropped))
		free(op->q[k++].path);
	if (!k)
		return;
	memmove(op->q, op->q + k, (op->len - k) * sizeof(*op->q));
	op->len -= k;
	op->next -= k;
	op->first += (int64_t)k;
}

/* the threads the queued opens want at work (called with the lock held) */
static unsigned wanted(const struct iodl_opener *op)
{
	uint64_t queued = op->len - op->next, k;

	if (!queued || (op->mean_ns && op->mean_ns < FAST_NS))
		return 0;	/* fast opens: the taker runs them (take) */
	k = op->mean_ns ? (queued * op->mean_ns + SHARE_NS - 1) / SHARE_NS : queued;
	if (k > op->threads)
		k = op->threads;
	return k > queued ? (unsigned)queued : (unsigned)k;
}

/* wake threads until as many are at work as the queue wants (called with the lock held) */
static void wake(struct iodl_opener *op)
{
	for (unsigned n = op->busy, k = wanted(op); n < k; n++)
		pthread_cond_signal(&op->work);
}

/* one unwanted fd: closed at once (a dropped request, a stopped pool) */
static void discard(struct request *r)
{
	if (r->res.fd >= 0)
		close((int)r->res.fd);
	r->res.fd = -1;
}

/*
 * Start the next queued open and finish it, in the calling thread: a pool thread's, or take()'s
 * when the opens are fast (see FAST_NS). Called with the lock held; it is released during the open.
 */
static void run_next(struct iodl_opener *op)
{
	/* the array may move while we open (submit grows it, retire shifts it): keep the ticket */
	int64_t ticket = op->first + (int64_t)op->next;
	struct request *r = &op->q[op->next++];
	struct iodl_open_result res = { .fd = -1, .size = -1, .dev = -1 };
	struct stat st;

	if (r->dropped) {	/* passed over before it began: nothing to open */
		r->state = DONE;
		retire(op);
		return;
	}
	r->state = RUNNING;
	char *path = r->path;
	int64_t size = r->size;
	int err;

	pthread_mutex_unlock(&op->mu);
	uint64_t t0 = iodl_now_ns();
	res.fd = open_checked(path, size, op->direct, op->inside, &err, &st);
	res.done_ns = (int64_t)iodl_now_ns();
	res.took_ns = res.done_ns - (int64_t)t0;
	res.err = err;
	if (res.fd >= 0) {
		res.size = (int64_t)st.st_size;
		res.dev = (int64_t)st.st_dev;
	}
	pthread_mutex_lock(&op->mu);

	r = &op->q[ticket - op->first];
	r->res = res;
	r->state = DONE;
	if (op->stopping || r->dropped)
		discard(r);
	retire(op);
	/* a mean over the last ~8 opens: it follows storage that turns slow within a batch */
	op->mean_ns = op->mean_ns ? op->mean_ns - op->mean_ns / 8 + (uint64_t)res.took_ns / 8
				  : (uint64_t)res.took_ns + 1;
	if (ticket == op->want)
		pthread_cond_broadcast(&op->done);
	wake(op);
}

static void *worker(void *arg)
{
	struct iodl_opener *op = arg;

	pthread_mutex_lock(&op->mu);
	for (;;) {
		if (!op->stopping && op->next == op->len) {
			op->busy--;
			while (!op->stopping && op->next == op->len)
				pthread_cond_wait(&op->work, &op->mu);
			op->busy++;
		}
		if (op->stopping)
			break;
		run_next(op);
	}
	int last = !--op->refs;

	pthread_mutex_unlock(&op->mu);
	if (last)
		destroy(op);
	return NULL;
}

struct iodl_opener *iodl_opener_new(unsigned threads, int direct, const char *inside)
{
	struct iodl_opener *op = calloc(1, sizeof(*op));
	pthread_condattr_t ca;
	pthread_attr_t ta;
	sigset_t all, old;
	unsigned started = 0;

	if (!op)
		return NULL;
	op->direct = direct;
	op->refs = 1;
	op->want = -1;
	if (inside && !(op->inside = strdup(inside))) {
		free(op);
		return NULL;
	}
	pthread_mutex_init(&op->mu, NULL);
	pthread_cond_init(&op->work, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);	/* take()'s timeout: immune to clock steps */
	pthread_cond_init(&op->done, &ca);
	pthread_condattr_destroy(&ca);

	/* small stacks (a node runs tens of ranks with several threads each); signals stay with
	 * the interpreter's threads (Ctrl-C must reach Python, not interrupt an open) */
	pthread_attr_init(&ta);
	pthread_attr_setstacksize(&ta, 256 << 10);
	pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_mutex_lock(&op->mu);
	for (unsigned i = 0; i < threads; i++) {
		pthread_t t;

		if (pthread_create(&t, &ta, worker, op))
			break;
		pthread_setname_np(t, "iodl-open");	/* top -H, /proc/PID/task/TID/comm: what each thread is */
		op->refs++;
		started++;
		op->threads++;
		op->busy++;	/* until it first finds the queue empty */
	}
	pthread_mutex_unlock(&op->mu);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&ta);
	if (!started) {
		destroy(op);
		errno = EAGAIN;
		return NULL;
	}
	return op;
}

int64_t iodl_opener_submit(struct iodl_opener *op, const char *paths, const int64_t *sizes, size_t n)
{
	int64_t first;

	pthread_mutex_lock(&op->mu);
	if (op->len + n > op->cap) {
		size_t cap = op->cap ? op->cap : 64;
		struct request *q;

		while (cap < op->len + n)
			cap *= 2;
		q = realloc(op->q, cap * sizeof(*q));
		if (!q) {
			pthread_mutex_unlock(&op->mu);
			errno = ENOMEM;
			return -1;
		}
		op->q = q;
		op->cap = cap;
	}
	first = op->first + (int64_t)op->len;
	for (size_t i = 0; i < n; i++) {
		struct request *r = &op->q[op->len];
		size_t len = strlen(paths);

		*r = (struct request){ .path = malloc(len + 1), .size = sizes[i],
				       .res = { .fd = -1, .size = -1, .dev = -1 } };
		if (!r->path) {
			pthread_mutex_unlock(&op->mu);
			errno = ENOMEM;
			return -1;	/* those queued so far stay: their tickets are never handed out, close() closes them */
		}
		memcpy(r->path, paths, len + 1);
		paths += len + 1;
		op->len++;
	}
	/* no more threads woken than the work wants: 32 ranks x 8 threads all woken per batch would
	 * fight over the lock (a preempted holder stalls the others for a time slice) */
	wake(op);
	pthread_mutex_unlock(&op->mu);
	return first;
}

/* the live, unclaimed request of a ticket, or NULL (called with the lock held) */
static struct request *find(struct iodl_opener *op, int64_t ticket)
{
	if (ticket < op->first || ticket >= op->first + (int64_t)op->len)
		return NULL;
	struct request *r = &op->q[ticket - op->first];

	return r->taken || r->dropped ? NULL : r;
}

int iodl_opener_take(struct iodl_opener *op, const int64_t *tickets, size_t n, struct iodl_open_result *out,
		     uint64_t timeout_ns)
{
	uint64_t until = iodl_now_ns() + timeout_ns;
	struct timespec ts = { .tv_sec = (time_t)(until / 1000000000ull), .tv_nsec = (long)(until % 1000000000ull) };
	size_t i = 0;

	pthread_mutex_lock(&op->mu);
	for (i = 0; i < n; i++) {
		if (!find(op, tickets[i])) {
			pthread_mutex_unlock(&op->mu);
			return -1;
		}
	}
	i = 0;
	while (i < n) {		/* tickets stay valid while not done: only done ones retire */
		unsigned char state = op->q[tickets[i] - op->first].state;

		if (state == DONE) {
			i++;
			continue;
		}
		if (state == QUEUED && !wanted(op) && !op->stopping) {
			/* not begun, and no thread is wanted for it (fast opens): this one opens the
			 * queue's next (it, or an earlier ticket, a later take's) instead of waiting */
			run_next(op);
			continue;
		}
		op->want = tickets[i];
		int rc = pthread_cond_timedwait(&op->done, &op->mu, &ts);

		op->want = -1;
		if (rc == ETIMEDOUT) {
			pthread_mutex_unlock(&op->mu);
			return 0;
		}
	}
	for (i = 0; i < n; i++) {
		struct request *r = &op->q[tickets[i] - op->first];

		out[i] = r->res;
		r->taken = 1;
	}
	retire(op);
	pthread_mutex_unlock(&op->mu);
	return 1;
}

void iodl_opener_drop(struct iodl_opener *op, const int64_t *tickets, size_t n)
{
	pthread_mutex_lock(&op->mu);
	for (size_t i = 0; i < n; i++) {
		struct request *r = find(op, tickets[i]);

		if (!r)
			continue;
		r->dropped = 1;
		if (r->state == DONE)
			discard(r);
	}
	retire(op);
	pthread_mutex_unlock(&op->mu);
}

void iodl_opener_free(struct iodl_opener *op)
{
	pthread_mutex_lock(&op->mu);
	op->stopping = 1;
	for (size_t i = 0; i < op->len; i++)
		if (op->q[i].state == DONE && !op->q[i].taken)
			discard(&op->q[i]);
	pthread_cond_broadcast(&op->work);
	int last = !--op->refs;

	pthread_mutex_unlock(&op->mu);
	if (last)
		destroy(op);
}

void iodl_close_fds(const int64_t *fds, size_t n, int64_t (*out)[2])
{
	for (size_t i = 0; i < n; i++) {
		uint64_t t0 = iodl_now_ns();

		if (fds[i] >= 0)
			close((int)fds[i]);
		out[i][0] = (int64_t)iodl_now_ns();
		out[i][1] = out[i][0] - (int64_t)t0;
	}
}

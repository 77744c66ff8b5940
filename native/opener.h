/*
 * The open-ahead pool (opener.c): a few threads that open a rank's dataset files in the order
 * they were asked for, before the reader needs them, as a data loader's workers do. Plain C, no
 * Python: bind_opener.c is its face. Each request is a ticket (a number, consecutive per pool);
 * the caller takes a batch's tickets at once, or drops those it will not use (their fds are then
 * closed by the pool, uncounted).
 */
#ifndef IODL_OPENER_H
#define IODL_OPENER_H

#include <stddef.h>
#include <stdint.h>

/* an open refused by a check (not a regular file, shorter than promised, a link outside the
 * root): no errno says it, the caller words it (iodl/engine.py open_for_read) */
#define IODL_OPEN_REFUSED (-1)

struct iodl_opener;

/* What one open did: fd (-1 on failure), err (0, an errno or IODL_OPEN_REFUSED), when it
 * returned and how long it took, on the engine's clock (sys.h iodl_now_ns); the fstat it made
 * through the fd: st_size and st_dev (-1 both on failure), which the engine then need not ask
 * again (core.h iodl_run_args.opened). */
struct iodl_open_result {
	int64_t fd, err, done_ns, took_ns, size, dev;
};

/* threads >= 1 open threads; inside: the dataset's real root (NULL: links are followed). NULL with
 * errno on failure. */
struct iodl_opener *iodl_opener_new(unsigned threads, int direct, const char *inside);
/* Queue n opens (paths NUL-terminated one after the other, each at least sizes[i] bytes);
 * returns the first one's ticket, the others follow it. -1 with errno (ENOMEM) on failure. */
int64_t iodl_opener_submit(struct iodl_opener *op, const char *paths, const int64_t *sizes, size_t n);
/* Wait up to timeout_ns for the tickets' opens; 1 and their results (the fds are then the
 * caller's) when all are done, 0 when the time ran out first (nothing taken), -1 at once when a
 * ticket is not waiting (taken, dropped or never given: the caller's mistake). */
int iodl_opener_take(struct iodl_opener *op, const int64_t *tickets, size_t n, struct iodl_open_result *out,
		     uint64_t timeout_ns);
/* The caller will not take these: each fd is closed once its open is done. */
void iodl_opener_drop(struct iodl_opener *op, const int64_t *tickets, size_t n);
/* Stop: queued opens are not started, those in progress finish on their thread and are closed
 * there, every fd not taken is closed. Never waits for an open (slow storage cannot hang a
 * stop); the pool's memory goes with its last thread. */
void iodl_opener_free(struct iodl_opener *op);
/* Close n fds, each timed: out[i] = (when close returned, how long it took). */
void iodl_close_fds(const int64_t *fds, size_t n, int64_t (*out)[2]);

#endif

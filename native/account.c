/*
 * What a completion counts for: the one definition of the measured window, the latency
 * histograms, the time series, the live counters and the depth samples. core.c's loop calls it
 * per completion; _native.account (bind_account.c) calls it over arrays a Python engine recorded, so
 * that engine's figures obey the same definition rather than a copy of it.
 */
#include "core.h"

/* the window's end, or the cancel time if that came first (0: unbounded) */
static uint64_t window_end(const struct iodl_run_args *a)
{
	uint64_t c = a->cancel_ns ? __atomic_load_n(a->cancel_ns, __ATOMIC_ACQUIRE) : 0;

	return c && (!a->window_end_ns || c < a->window_end_ns) ? c : a->window_end_ns;
}

static int in_window(const struct iodl_run_args *a, uint64_t t)
{
	uint64_t end = window_end(a);

	return (!a->window_start_ns || t >= a->window_start_ns) && (!end || t < end);
}

static void series_add(const struct iodl_run_args *a, struct iodl_stats *st, const struct iodl_done *d,
		       unsigned hist_idx)
{
	uint64_t b = d->t_ns > a->series_origin_ns ? (d->t_ns - a->series_origin_ns) / a->series_bucket_ns : 0;
	int64_t *row;

	if (b >= a->series_rows) {
		/* filed in the last row rather than dropped, so the columns still add up to the stats */
		b = a->series_rows - 1;
		st->series_clamped++;
	}
	row = a->series + b * IODL_SERIES_WIDTH;
	row[IODL_SERIES_BYTES] += (int64_t)d->bytes;
	row[IODL_SERIES_IOS]++;
	row[IODL_SERIES_CACHED] += (int64_t)d->cached;
	row[IODL_SERIES_LAT + (hist_idx >> IODL_SERIES_SHIFT)]++;
}

/*
 * Another process reads these while we run. We are the only writer of our counters, so a
 * relaxed load and store (no read-modify-write, no lock) is enough: a reader sees each
 * counter whole, old or new.
 */
static void live_add(int64_t *live, unsigned i, uint64_t v)
{
	__atomic_store_n(&live[i], __atomic_load_n(&live[i], __ATOMIC_RELAXED) + (int64_t)v, __ATOMIC_RELAXED);
}

/*
 * A sync row: its own counters and histogram, never ios, bytes, hist, the series or the live
 * counters (those are the data requests'); it still marks the last counted completion, so a run
 * that ends with an fsync is measured up to the fsync's return.
 */
static int account_sync(const struct iodl_run_args *a, struct iodl_stats *st, const struct iodl_done *d)
{
	if (!in_window(a, d->t_ns))
		return 0;
	st->fsyncs++;
	st->fsync_ns += d->lat_ns;
	if (a->fsync_hist)
		a->fsync_hist[iodl_hist_index(d->lat_ns)]++;
	if (!st->t_first_ns)
		st->t_first_ns = d->t_ns;
	st->t_last_ns = d->t_ns;
	return 1;
}

int iodl_account(const struct iodl_run_args *a, struct iodl_stats *st, const struct iodl_done *d)
{
	int counted;

	if (d->op == IODL_OP_FSYNC || d->op == IODL_OP_FDATASYNC)
		return account_sync(a, st, d);
	counted = in_window(a, d->t_ns);
	if (counted) {
		unsigned idx = iodl_hist_index(d->lat_ns);
		int w = d->op == IODL_OP_WRITE;
		int64_t *hist = w && a->write_hist ? a->write_hist : a->hist;
		int64_t *clat = w && a->write_clat_hist ? a->write_clat_hist : a->clat_hist;
		int64_t *slat = w && a->write_slat_hist ? a->write_slat_hist : a->slat_hist;

		hist[idx]++;
		if (d->lat_ns > st->max_ns)
			st->max_ns = d->lat_ns;
		st->ios++;
		st->bytes += d->bytes;
		if (d->op == IODL_OP_WRITE) {
			st->write_ios++;
			st->write_bytes += d->bytes;
		}
		st->cached_bytes += d->cached;
		if (d->unmeasured)
			st->cache_unmeasured_bytes += d->bytes;
		if (!st->t_first_ns)
			st->t_first_ns = d->t_ns;
		st->t_last_ns = d->t_ns;
		if (a->series)
			series_add(a, st, d, idx);
		if (a->records) {
			if (a->records->n < a->records->cap) {
				struct iodl_io_record *rec = &a->records->buf[a->records->n++];

				rec->t_ns = d->t_ns;
				rec->lat_ns = d->lat_ns;
				rec->clat_ns = d->clat_ns;
				rec->slat_ns = d->has_slat ? d->slat_ns : 0;
				rec->bytes = d->bytes;
				rec->offset = d->offset;
				rec->op = (uint64_t)d->op;
			} else {
				a->records->lost++;
			}
		}
		if (clat)
			clat[iodl_hist_index(d->clat_ns)]++;
		/* sync engines have no submit call apart from the read: fio records no slat for them */
		if (slat && d->has_slat)
			slat[iodl_hist_index(d->slat_ns)]++;
	}
	/* progress moves during a ramp too: every completion, counted or not */
	if (a->live) {
		live_add(a->live, IODL_LIVE_BYTES, d->bytes);
		live_add(a->live, IODL_LIVE_IOS, 1);
		live_add(a->live, IODL_LIVE_CACHED, d->cached);
	}
	return counted;
}

void iodl_account_submit(const struct iodl_run_args *a, struct iodl_stats *st, uint64_t t_ns, unsigned inflight,
			 unsigned n)
{
	/* as fio: every request of a batch sees the depth the batch brought us to */
	if (in_window(a, t_ns))
		st->depth[iodl_depth_index(inflight)] += n;
}

void iodl_account_finish(const struct iodl_run_args *a, struct iodl_stats *st, uint64_t now)
{
	uint64_t end = window_end(a);

	if (!st->t_start_ns)
		st->t_start_ns = st->t_end_ns = now;	/* nothing was issued */
	if (!a->window_start_ns && !end)
		return;
	/* what was measured: from the window's start (or the first submit, if later) to the last
	 * counted completion, or the window's end if requests were still in flight then */
	if (!st->ios && !st->fsyncs) {
		st->t_start_ns = st->t_end_ns = 0;
		return;
	}
	if (st->t_start_ns < a->window_start_ns)
		st->t_start_ns = a->window_start_ns;
	st->t_end_ns = end && st->t_end_ns >= end ? end : st->t_last_ns;
}

/*
 * A batch's rows of a dataset table (iodl/data/tables.py TableRows), read in one call. A rank
 * looks up a batch's file sizes and sample extents in shuffled order: one pread of 8 or 16 bytes
 * per row from Python cost ~4 us a row (bench/results/emu-cost.md). Here the rows are sorted by
 * place and each run of rows that lie close together in the file (within ROWS_SPAN bytes) is one
 * pread: a table of 4,000 files is 8 pages, and a batch of 24 of its rows a few reads; rows far
 * apart (a table of 1,000,000 files) cost a pread each, as before, without Python. Nothing is
 * mapped: the table's pages stay in the node's page cache, out of each rank's RSS.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rows.h"

/* rows whose bytes lie this close are read together (a page: as cheap to copy as a syscall) */
#define ROWS_SPAN 4096

struct place {
	uint64_t row;	/* stored row */
	size_t at;	/* its place in the caller's order */
};

static int by_row(const void *a, const void *b)
{
	uint64_t x = ((const struct place *)a)->row, y = ((const struct place *)b)->row;

	return (x > y) - (x < y);
}

int iodl_pread_rows(int fd, uint64_t base, size_t row_bytes, const uint64_t *rows, size_t n, unsigned char *out)
{
	struct place *p = malloc((n ? n : 1) * sizeof(*p));
	unsigned char *buf = NULL;
	size_t cap = 0;
	int rc = 0;

	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		p[i] = (struct place){ rows[i], i };
	qsort(p, n, sizeof(*p), by_row);
	for (size_t i = 0; i < n && !rc;) {
		size_t j = i + 1;

		/* p[i..j): one read, from p[i]'s row to p[j-1]'s end */
		while (j < n && (p[j].row - p[j - 1].row) * row_bytes <= ROWS_SPAN)
			j++;
		size_t want = (size_t)(p[j - 1].row - p[i].row + 1) * row_bytes;

		if (want > cap) {
			unsigned char *grown = realloc(buf, want);

			if (!grown) {
				rc = -ENOMEM;
				break;
			}
			buf = grown;
			cap = want;
		}
		size_t got = 0;

		while (got < want) {
			ssize_t r = pread(fd, buf + got, want - got, (off_t)(base + p[i].row * row_bytes + got));

			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0) {
				rc = -errno;
				break;
			}
			if (!r) {
				rc = IODL_ROWS_SHORT;
				break;
			}
			got += (size_t)r;
		}
		for (size_t k = i; k < j && !rc; k++)
			memcpy(out + p[k].at * row_bytes, buf + (p[k].row - p[i].row) * row_bytes, row_bytes);
		i = j;
	}
	free(buf);
	free(p);
	return rc;
}

/*
 * Page-cache residency with mincore(): map the file PROT_READ/MAP_SHARED without touching it
 * (no page is faulted in, nothing is read ahead), ask which pages are resident, unmap. This
 * needs per-page answers, which cachestat() cannot give. Since Linux 5.2 mincore reports page
 * cache state only to the file's owner or to someone who could write it (CVE-2019-5489);
 * otherwise it reports nothing resident, so cached bytes read as 0 (never too high).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"

static uint64_t page_size(void)
{
	return (uint64_t)sysconf(_SC_PAGESIZE);
}

/* mincore vector of [first page, first page + npages) of fd; *vec is malloc'ed. */
static int residency(int fd, uint64_t first, size_t npages, unsigned char **vec, const char **failed)
{
	uint64_t ps = page_size();
	void *map;
	int rc = 0;

	*vec = calloc(npages ? npages : 1, 1);
	if (!*vec) {
		*failed = "malloc";
		return -ENOMEM;
	}
	if (!npages)
		return 0;
	map = mmap(NULL, npages * ps, PROT_READ, MAP_SHARED, fd, (off_t)(first * ps));
	if (map == MAP_FAILED) {
		*failed = "mmap";
		rc = -errno;
	} else {
		if (mincore(map, npages * ps, *vec) < 0) {
			*failed = "mincore";
			rc = -errno;
		}
		munmap(map, npages * ps);
	}
	if (rc) {
		free(*vec);
		*vec = NULL;
	}
	return rc;
}

static uint64_t count(const unsigned char *vec, uint64_t first, size_t npages, uint64_t offset,
		      uint64_t len)
{
	uint64_t ps = page_size(), end = offset + len, total = 0;

	if (!len)
		return 0;
	for (uint64_t p = offset / ps; p <= (end - 1) / ps; p++) {
		uint64_t lo, hi;

		if (p < first || p - first >= npages || !(vec[p - first] & 1))
			continue;
		lo = p * ps > offset ? p * ps : offset;
		hi = (p + 1) * ps < end ? (p + 1) * ps : end;
		total += hi - lo;
	}
	return total;
}

uint64_t iodl_snap_cached(const struct iodl_snap *snap, uint64_t offset, uint64_t len)
{
	return count(snap->vec, 0, snap->npages, offset, len);
}

/*
 * The snapshot of fd taken at its first use since the Engine was made or forget(fd); a
 * different file behind the same fd number (dev/ino changed) gets a fresh one.
 */
int iodl_snap_get(struct iodl_snaps *s, int fd, dev_t dev, ino_t ino, uint64_t size,
		  const struct iodl_snap **out, const char **failed)
{
	struct iodl_snap *snap;
	int rc;

	*out = NULL;
	for (size_t i = 0; i < s->n; i++) {
		if (s->v[i]->fd == fd && s->v[i]->dev == dev && s->v[i]->ino == ino) {
			*out = s->v[i];
			return 0;
		}
	}
	iodl_snap_forget(s, fd);
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 16;
		struct iodl_snap **v = realloc(s->v, cap * sizeof(*v));

		if (!v) {
			*failed = "malloc";
			return -ENOMEM;
		}
		s->v = v;
		s->cap = cap;
	}
	snap = calloc(1, sizeof(*snap));
	if (!snap) {
		*failed = "malloc";
		return -ENOMEM;
	}
	snap->fd = fd;
	snap->dev = dev;
	snap->ino = ino;
	snap->size = size;
	snap->npages = (size_t)((size + page_size() - 1) / page_size());
	rc = residency(fd, 0, snap->npages, &snap->vec, failed);
	if (rc < 0) {
		free(snap);
		return rc;
	}
	s->v[s->n++] = snap;
	*out = snap;
	return 0;
}

void iodl_snap_forget(struct iodl_snaps *s, int fd)
{
	for (size_t i = 0; i < s->n; i++) {
		if (s->v[i]->fd == fd) {
			free(s->v[i]->vec);
			free(s->v[i]);
			s->v[i] = s->v[--s->n];
			return;
		}
	}
}

void iodl_snaps_free(struct iodl_snaps *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i]->vec);
		free(s->v[i]);
	}
	free(s->v);
	memset(s, 0, sizeof(*s));
}

int iodl_resident_bytes(int fd, uint64_t offset, uint64_t len, uint64_t *out, const char **failed)
{
	uint64_t ps = page_size(), first, last;
	struct stat sb;
	unsigned char *vec;
	int rc;

	*out = 0;
	if (fstat(fd, &sb) < 0) {
		*failed = "fstat";
		return -errno;
	}
	if (offset >= (uint64_t)sb.st_size || !len)
		return 0;
	if (len > (uint64_t)sb.st_size - offset)
		len = (uint64_t)sb.st_size - offset;
	first = offset / ps;
	last = (offset + len - 1) / ps;
	rc = residency(fd, first, (size_t)(last - first + 1), &vec, failed);
	if (rc < 0)
		return rc;
	*out = count(vec, first, (size_t)(last - first + 1), offset, len);
	free(vec);
	return 0;
}

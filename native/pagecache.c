/*
 * Page-cache figures that hold for any caller, or say that they cannot be had.
 *
 * Hits. A request's bytes are served from the page cache unless the read made the storage
 * deliver them. The kernel counts, per thread, the bytes of every read bio the thread submits
 * (task I/O accounting: submit_bio -> task_io_account_read; /proc/thread-self/io read_bytes,
 * getrusage(RUSAGE_THREAD).ru_inblock in 512-byte units). Our reads submit their own misses and
 * the readahead they trigger, so the thread's counter across a run is what the storage had to
 * deliver for it, whoever owns the file. Asking the cache instead (mincore, or a preadv2 with
 * RWF_NOWAIT before each request) cannot be right: mincore reports every page resident to a
 * caller who neither owns nor may write the file, and both see the pages our own readahead
 * brought in a moment earlier as resident, though the storage delivered them.
 *
 * Resident bytes (what a dataset has in the cache before a run): cachestat(2) (Linux 6.5),
 * which refuses (EPERM) a caller who neither owns nor may write the file rather than lie; on
 * kernels without it, mincore, only when the kernel tells this caller the truth (its
 * can_do_mincore test: owner, CAP_FOWNER, or write permission).
 */
#define _GNU_SOURCE	/* RUSAGE_THREAD */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <stdio.h>
#include <unistd.h>

#include "core.h"

#ifndef __NR_cachestat
# define __NR_cachestat 451	/* the same number on every architecture */
#endif

struct cachestat_range {
	uint64_t off, len;
};

struct cachestat {
	uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

static uint64_t page_size(void)
{
	return (uint64_t)sysconf(_SC_PAGESIZE);
}

int iodl_task_io_accounting(void)
{
	static int known = -1;

	/* CONFIG_TASK_IO_ACCOUNTING: without it the counter below stays 0 and would read as all hits */
	if (known < 0)
		known = access("/proc/thread-self/io", R_OK) == 0;
	return known;
}

uint64_t iodl_thread_read_bytes(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_THREAD, &ru) < 0)
		return 0;
	return (uint64_t)ru.ru_inblock * 512;
}

/*
 * Do reads of this file reach the storage through bios submitted by the reader (so that task
 * I/O accounting sees them)? Yes for block devices and filesystems on one (their st_dev is a
 * block device), and for btrfs (an anonymous st_dev over real devices). tmpfs and ramfs have no
 * storage: every byte comes from memory, which the counter (0) says truly. Anything else (NFS,
 * FUSE, overlay, ...) may read without bios of ours: not measured.
 */
int iodl_reads_accounted(int fd, const struct stat *sb)
{
	char path[64];
	struct statfs fs;

	if (S_ISBLK(sb->st_mode))
		return 1;
	if (!S_ISREG(sb->st_mode))
		return 0;
	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u", major(sb->st_dev), minor(sb->st_dev));
	if (access(path, F_OK) == 0)
		return 1;
	return fstatfs(fd, &fs) == 0 && (fs.f_type == BTRFS_SUPER_MAGIC || fs.f_type == TMPFS_MAGIC ||
					  fs.f_type == RAMFS_MAGIC);
}

/* Pages of [first, first + n) of fd in the cache: 0, IODL_NOT_MEASURABLE, or -errno. */
static int cached_pages_cachestat(int fd, uint64_t first, uint64_t n, uint64_t *pages)
{
	struct cachestat_range r = { first * page_size(), n * page_size() };
	struct cachestat cs;

	if (syscall(__NR_cachestat, fd, &r, &cs, 0) < 0)
		return errno == EPERM ? IODL_NOT_MEASURABLE : -errno;
	*pages = cs.nr_cache;
	return 0;
}

/* The kernel's can_do_mincore(): the owner, CAP_FOWNER, or someone who may write the file. */
static int mincore_tells_the_truth(int fd, const struct stat *sb)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct caps[2];
	char path[64];

	if (sb->st_uid == geteuid())
		return 1;
	if (syscall(SYS_capget, &hdr, caps) == 0 && (caps[CAP_FOWNER / 32].effective & (1u << (CAP_FOWNER % 32))))
		return 1;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) == 0;
}

static int cached_pages_mincore(int fd, uint64_t first, uint64_t n, uint64_t *pages)
{
	uint64_t ps = page_size();
	unsigned char *vec = malloc(n ? n : 1);
	void *map;
	int rc = 0;

	if (!vec)
		return -ENOMEM;
	map = mmap(NULL, n * ps, PROT_READ, MAP_SHARED, fd, (off_t)(first * ps));
	if (map == MAP_FAILED) {
		rc = -errno;
	} else {
		if (mincore(map, n * ps, vec) < 0)
			rc = -errno;
		munmap(map, n * ps);
	}
	*pages = 0;
	for (uint64_t i = 0; !rc && i < n; i++)
		*pages += vec[i] & 1;
	free(vec);
	return rc;
}

static int cached_pages(int fd, const struct stat *sb, uint64_t first, uint64_t n, uint64_t *pages,
			const char **failed)
{
	static int have_cachestat = 1;
	int rc;

	*pages = 0;
	if (!n)
		return 0;
	if (have_cachestat) {
		*failed = "cachestat";
		rc = cached_pages_cachestat(fd, first, n, pages);
		if (rc != -ENOSYS)
			return rc;
		have_cachestat = 0;	/* before Linux 6.5 */
	}
	if (!mincore_tells_the_truth(fd, sb))
		return IODL_NOT_MEASURABLE;
	*failed = "mincore";
	return cached_pages_mincore(fd, first, n, pages);
}

int iodl_resident_bytes(int fd, uint64_t offset, uint64_t len, uint64_t *out, const char **failed)
{
	uint64_t ps = page_size(), end, first, last, pages;
	struct stat sb;
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
	end = offset + len;
	first = offset / ps;
	last = (end - 1) / ps;
	/* whole pages in the middle, then the two end pages by the bytes of the range on them */
	if (last > first + 1) {
		rc = cached_pages(fd, &sb, first + 1, last - first - 1, &pages, failed);
		if (rc)
			return rc;
		*out += pages * ps;
	}
	rc = cached_pages(fd, &sb, first, 1, &pages, failed);
	if (rc)
		return rc;
	if (pages)
		*out += (last == first ? end : (first + 1) * ps) - offset;
	if (last != first) {
		rc = cached_pages(fd, &sb, last, 1, &pages, failed);
		if (rc)
			return rc;
		if (pages)
			*out += end - last * ps;
	}
	return 0;
}

/*
 * Raw syscall wrappers: no libaio, no liburing. Each returns the result or -errno (liburing
 * style), so callers never read errno after the fact. Syscall numbers fall back to the
 * asm-generic values when the build host's headers predate the syscall (fio arch/arch.h).
 */
#ifndef IODL_SYS_H
#define IODL_SYS_H

#include <errno.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <linux/aio_abi.h>
#include "uapi/io_uring.h"

#ifndef __NR_io_uring_setup
# if defined(__alpha__)
#  define __NR_io_uring_setup		535
#  define __NR_io_uring_enter		536
#  define __NR_io_uring_register	537
# else
#  define __NR_io_uring_setup		425
#  define __NR_io_uring_enter		426
#  define __NR_io_uring_register	427
# endif
#endif

static inline long sys_ret(long r)
{
	return r < 0 ? -errno : r;
}

static inline int sys_io_setup(unsigned nr, aio_context_t *ctx)
{
	return (int)sys_ret(syscall(__NR_io_setup, nr, ctx));
}

static inline int sys_io_destroy(aio_context_t ctx)
{
	return (int)sys_ret(syscall(__NR_io_destroy, ctx));
}

static inline int sys_io_submit(aio_context_t ctx, long n, struct iocb **iocbs)
{
	return (int)sys_ret(syscall(__NR_io_submit, ctx, n, iocbs));
}

/* How long one wait in the kernel may last: a stop request is looked for between waits. */
#define IODL_WAIT_SLICE_NS 100000000ull

struct iodl_kts {		/* struct __kernel_timespec: 64-bit on every ABI */
	int64_t tv_sec, tv_nsec;
};

static inline struct iodl_kts iodl_kts(uint64_t ns)
{
	return (struct iodl_kts){ (int64_t)(ns / 1000000000ull), (int64_t)(ns % 1000000000ull) };
}

/* io_getevents with a relative timeout (NULL: none); 0 events after it expires is normal */
static inline int sys_io_getevents(aio_context_t ctx, long min, long max, struct io_event *ev,
				   const struct iodl_kts *timeout)
{
	return (int)sys_ret(syscall(__NR_io_getevents, ctx, min, max, ev, timeout));
}

static inline int sys_io_uring_setup(unsigned entries, struct io_uring_params *p)
{
	return (int)sys_ret(syscall(__NR_io_uring_setup, entries, p));
}

static inline int sys_io_uring_enter(int fd, unsigned submit, unsigned min, unsigned flags)
{
	return (int)sys_ret(syscall(__NR_io_uring_enter, fd, submit, min, flags, NULL, 0));
}

/* io_uring_enter waiting at most `timeout` (IORING_ENTER_EXT_ARG, 5.11): -ETIME when it expired */
static inline int sys_io_uring_wait(int fd, unsigned min, const struct iodl_kts *timeout)
{
	struct io_uring_getevents_arg arg = { .ts = (uint64_t)(uintptr_t)timeout };

	return (int)sys_ret(syscall(__NR_io_uring_enter, fd, 0, min,
				    IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG, &arg, sizeof(arg)));
}

static inline int sys_io_uring_register(int fd, unsigned op, const void *arg, unsigned n)
{
	return (int)sys_ret(syscall(__NR_io_uring_register, fd, op, arg, n));
}

/* The engine's one clock; the vDSO makes it a few ns, cheap enough to read once per batch. */
static inline uint64_t iodl_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sleep until an absolute CLOCK_MONOTONIC time; returns 0 or -EINTR. Never spins. */
static inline int iodl_sleep_until(uint64_t t_ns)
{
	struct timespec ts = { .tv_sec = (time_t)(t_ns / 1000000000ull),
			       .tv_nsec = (long)(t_ns % 1000000000ull) };

	return -clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

#endif

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

static inline int sys_io_getevents(aio_context_t ctx, long min, long max, struct io_event *ev)
{
	return (int)sys_ret(syscall(__NR_io_getevents, ctx, min, max, ev, NULL));
}

static inline int sys_io_uring_setup(unsigned entries, struct io_uring_params *p)
{
	return (int)sys_ret(syscall(__NR_io_uring_setup, entries, p));
}

static inline int sys_io_uring_enter(int fd, unsigned submit, unsigned min, unsigned flags)
{
	return (int)sys_ret(syscall(__NR_io_uring_enter, fd, submit, min, flags, NULL, 0));
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

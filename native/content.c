/*
 * Write content as fio makes it, for jobs that ask for it (buffer_compress_percentage/chunk,
 * dedupe_percentage, buffer_pattern, zero_buffers, refill_buffers, scramble_buffers): fio 3.33
 * io_u.c fill_io_buffer, get_buf_state/save_buf_state (dedupe_mode=repeat), small_content_scramble,
 * lib/rand.c __fill_random_buf_percentage. The random bytes are splitmix64's rather than fio's hash
 * chain: equally incompressible, which is all a compressing or deduplicating target can see.
 * Without a content request the core's own content is used (core.c write_content).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "sys.h"

#define GOLDEN 0x9e3779b97f4a7c15ull

struct iodl_content {
	unsigned compress_pct, dedupe_pct;
	uint64_t chunk, min_write;
	int zero, refill, scramble;
	unsigned char *pattern;
	size_t pattern_len;
	uint64_t state, prev, ret, dedupe_rng;	/* fio's buf_state, buf_state_prev, buf_state_ret, dedupe_state */
};

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t next(uint64_t *s)
{
	return mix64(*s += GOLDEN);
}

static void fill_random(unsigned char *p, uint64_t n, uint64_t seed)
{
	uint64_t i, v;

	for (i = 0; i + 8 <= n; i += 8) {
		v = next(&seed);
		memcpy(p + i, &v, 8);
	}
	if (i < n) {
		v = next(&seed);
		memcpy(p + i, &v, n - i);
	}
}

static void fill_pattern(const struct iodl_content *ct, unsigned char *p, uint64_t n)
{
	if (!ct->pattern_len) {
		memset(p, 0, n);
		return;
	}
	for (uint64_t i = 0; i < n; i += ct->pattern_len)
		memcpy(p + i, ct->pattern, n - i < ct->pattern_len ? n - i : ct->pattern_len);
}

/* lib/rand.c __fill_random_buf_percentage: per segment, (100 - pct)% random, then pattern (or zeros) */
static void fill_percentage(const struct iodl_content *ct, unsigned char *buf, uint64_t seed, uint64_t segment,
			    uint64_t len)
{
	if (ct->compress_pct == 100) {
		fill_pattern(ct, buf, len);
		return;
	}
	if (segment > len)
		segment = len;
	while (len) {
		uint64_t n = segment * (100 - ct->compress_pct) / 100;

		if (n > len)
			n = len;
		fill_random(buf, n, seed);
		len -= n;
		if (!len)
			break;
		buf += n;
		n = segment - n;
		if (n > len || len - n <= sizeof(long))
			n = len;
		fill_pattern(ct, buf, n);
		len -= n;
		buf += n;
	}
}

/* io_u.c get_buf_state (dedupe_mode=repeat): a buffer is either a repeat (fio's prev state) or new */
static uint64_t *buf_state(struct iodl_content *ct)
{
	if (!ct->dedupe_pct)
		return &ct->state;
	if (ct->dedupe_pct == 100) {
		ct->prev = ct->state;
		return &ct->state;
	}
	if (next(&ct->dedupe_rng) % 100 + 1 <= ct->dedupe_pct) {
		ct->ret = ct->prev;
		return &ct->ret;
	}
	return &ct->state;
}

static void save_state(struct iodl_content *ct, uint64_t *rs)
{
	if (ct->dedupe_pct == 100)
		*rs = ct->prev;
	else if (rs == &ct->state)
		ct->prev = *rs;
}

/* io_u.c fill_io_buffer */
static void fill_io_buffer(struct iodl_content *ct, unsigned char *buf, uint64_t max_bs)
{
	if (ct->compress_pct || ct->dedupe_pct) {
		uint64_t *rs = NULL, left = max_bs, min_write = ct->min_write;

		do {
			uint64_t n;

			if (!rs)
				rs = buf_state(ct);
			if (min_write > left)
				min_write = left;
			n = min_write && ct->chunk ? (min_write < ct->chunk ? min_write : ct->chunk)
						   : (min_write ? min_write : ct->chunk);
			if (!n)
				n = left;
			fill_percentage(ct, buf, next(rs), n, n);
			buf += n;
			left -= n;
			save_state(ct, rs);
		} while (left);
	} else if (ct->pattern_len) {
		fill_pattern(ct, buf, max_bs);
	} else if (ct->zero) {
		memset(buf, 0, max_bs);
	} else {
		fill_random(buf, max_bs, next(buf_state(ct)));
	}
}

/* io_u.c small_content_scramble: the offset and the issue time in every 512-byte block */
static void scramble(unsigned char *p, uint64_t len, uint64_t offset)
{
	uint64_t now = iodl_now_ns(), sec = now / 1000000000u, nsec = now % 1000000000u;
	unsigned at = (unsigned)((nsec ^ offset) & 7);

	for (uint64_t i = 0; i + 512 <= len; i += 512, offset += 512) {
		memcpy(p + i + (at << 6), &offset, 8);
		memcpy(p + i + 64 - 16, &sec, 8);
		memcpy(p + i + 64 - 8, &nsec, 8);
	}
}

void iodl_content_write(struct iodl_ctx *c, struct iodl_req *r, uint64_t len)
{
	struct iodl_content *ct = c->content;
	unsigned char *buf = c->pool + (size_t)r->slot * c->slot_size;

	r->stale = 0;
	if (ct->refill || r->last_written == UINT64_MAX) {
		/* refill_buffers, or the slot's first write: fio fills every buffer once at start. A read
		 * into the slot since changes nothing: fio then writes what the read left (and scrambles it) */
		fill_io_buffer(ct, buf, ct->refill ? len : c->slot_size);
		r->last_written = 0;
	} else if (ct->scramble) {
		scramble(buf, len, r->offset);
	}
}

int iodl_content_set(struct iodl_ctx *c, unsigned compress_pct, uint64_t chunk, unsigned dedupe_pct,
		     const void *pattern, size_t pattern_len, int zero, int refill, int scramble_, uint64_t min_write,
		     uint64_t seed)
{
	struct iodl_content *ct = calloc(1, sizeof(*ct));

	if (!ct)
		return -ENOMEM;
	if (pattern_len) {
		ct->pattern = malloc(pattern_len);
		if (!ct->pattern) {
			free(ct);
			return -ENOMEM;
		}
		memcpy(ct->pattern, pattern, pattern_len);
		ct->pattern_len = pattern_len;
	}
	ct->compress_pct = compress_pct;
	ct->chunk = chunk;
	ct->dedupe_pct = dedupe_pct;
	ct->zero = zero;
	ct->refill = refill;
	ct->scramble = scramble_;
	ct->min_write = min_write;
	ct->state = ct->prev = mix64(seed);
	ct->dedupe_rng = mix64(seed ^ 0xded0ded0ull);
	iodl_content_free(c);
	c->content = ct;
	/* every slot is filled as fio fills its buffers at start, before its first write */
	for (unsigned i = 0; i < c->depth; i++)
		c->reqs[i].last_written = UINT64_MAX;
	return 0;
}

void iodl_content_free(struct iodl_ctx *c)
{
	if (c->content) {
		free(c->content->pattern);
		free(c->content);
		c->content = NULL;
	}
}

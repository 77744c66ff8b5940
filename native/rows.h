/*
 * A batch's rows of a table file (rows.c): plain C, bind_rows.c is its face.
 */
#ifndef IODL_ROWS_H
#define IODL_ROWS_H

#include <stddef.h>
#include <stdint.h>

/* the file ended before a row asked for: a table cut while iodl reads it */
#define IODL_ROWS_SHORT 1

/* out[i] = the row_bytes bytes at base + rows[i] * row_bytes of fd, for i < n; rows close together
 * in the file are read by one pread. 0, IODL_ROWS_SHORT, or -errno. */
int iodl_pread_rows(int fd, uint64_t base, size_t row_bytes, const uint64_t *rows, size_t n, unsigned char *out);

#endif

/*
 * The C reference of bench_emu_cost.py: the plain open-read-close loop with nothing of Python's,
 * so what is left of a file's cost is the kernel's (what no emulator can take away on this machine).
 *
 *     c_loop LIST K N PACED BATCH COMPUTE_S PASSES BLOCK
 *
 * Reads the files of LIST (one path a line) whose line index is K modulo N, PASSES times: open,
 * read, close. BLOCK 0: a file of one sample, in one read of its size (fstat'ed, as Python's
 * read() does); else BLOCK-byte reads into one buffer to the end, as the Python loop. PACED: a sleep of COMPUTE_S after every BATCH files (a rank's pace).
 * Prints the median pass's CPU (user + system) per file, in microseconds.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double cpu_s(void)
{
	struct rusage r;

	getrusage(RUSAGE_SELF, &r);
	return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc != 9) {
		fprintf(stderr, "usage: c_loop LIST K N PACED BATCH COMPUTE_S PASSES BLOCK\n");
		return 2;
	}
	FILE *list = fopen(argv[1], "r");
	long k = atol(argv[2]), n = atol(argv[3]), batch = atol(argv[5]), passes = atol(argv[7]);
	int paced = atoi(argv[4]);
	double compute = atof(argv[6]);
	size_t block = (size_t)atol(argv[8]), cap = 0, count = 0, line_no = 0;
	char line[4096], **paths = NULL;

	if (!list || n < 1 || batch < 1 || passes < 1)
		return 2;
	while (fgets(line, sizeof(line), list)) {
		if ((long)(line_no++ % n) != k)
			continue;
		line[strcspn(line, "\n")] = 0;
		if (count == cap) {
			cap = cap ? 2 * cap : 1024;
			paths = realloc(paths, cap * sizeof(*paths));
		}
		paths[count++] = strdup(line);
	}
	if (!count)
		return 2;
	int whole = block == 0;
	size_t size = block;
	struct stat st;

	for (size_t i = 0; whole && i < count; i++)	/* a buffer that holds the largest file */
		if (stat(paths[i], &st) == 0 && (size_t)st.st_size > size)
			size = (size_t)st.st_size;
	/*
	 * Page-aligned, as iodl's request buffers are: the kernel's copy into a buffer that starts a few
	 * bytes past a page boundary (malloc's mmap'ed blocks: 16) runs ~3x slower on this VM's CPU (the
	 * copy's destination a short distance after its page-aligned source), which is not the loop's cost.
	 */
	char *buf = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
	double *per_pass = calloc((size_t)passes, sizeof(double));
	struct timespec pace = { (time_t)compute, (long)((compute - (time_t)compute) * 1e9) };

	for (long p = 0; p < passes; p++) {
		double t0 = cpu_s();

		for (size_t i = 0; i < count; i++) {
			int fd = open(paths[i], O_RDONLY | O_CLOEXEC);

			if (fd < 0) {
				perror(paths[i]);
				return 1;
			}
			if (whole) {	/* one read of the file's size: the size from fstat, as Python's read() */
				if (fstat(fd, &st) == 0 && read(fd, buf, (size_t)st.st_size) < 0)
					perror("read");
			} else {
				while (read(fd, buf, block) > 0)
					;
			}
			close(fd);
			if (paced && (long)(i % (size_t)batch) == batch - 1)
				nanosleep(&pace, NULL);
		}
		per_pass[p] = (cpu_s() - t0) / (double)count;
	}
	qsort(per_pass, (size_t)passes, sizeof(double), by_value);
	printf("%.3f\n", per_pass[passes / 2] * 1e6);
	return 0;
}

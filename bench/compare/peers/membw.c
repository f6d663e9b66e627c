/*
 * The machine's single-thread memory bandwidth, for bench/compare's
 * header: the physical limit a shared-memory collective works under.
 * memcpy of a 64 MiB buffer (bytes read + written per second), and
 * c[i] = a[i] + b[i] over float32 arrays of 64 MiB each.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(void) {
	size_t bytes = 64u << 20, count = bytes / sizeof(float);
	float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
	if (!a || !b || !c) return 1;
	for (size_t i = 0; i < count; i++) a[i] = b[i] = c[i] = (float)i;
	double best = 1e9;
	for (int r = 0; r < 5; r++) {
		double t = now();
		memcpy(c, a, bytes);
		t = now() - t;
		if (t < best) best = t;
	}
	printf("memcpy: %.2f GB/s (read+write)\n", 2 * bytes / best / 1e9);
	best = 1e9;
	for (int r = 0; r < 5; r++) {
		double t = now();
		for (size_t i = 0; i < count; i++) c[i] = a[i] + b[i];
		t = now() - t;
		if (t < best) best = t;
	}
	printf("a+b: %.2f GB/s (two reads, one write; c[1] = %g)\n", 3 * bytes / best / 1e9, c[1]);
	return 0;
}

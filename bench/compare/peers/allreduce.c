/*
 * The MPI side of bench/compare: MPI_Allreduce of float32 sums over a size
 * sweep, doubling from MIN to MAX bytes, built with Open MPI's or MPICH's
 * mpicc by run.sh. It prints nccl-tests' columns, as collbench does:
 *
 *   size count time_us algbw busbw wrong
 *
 * time_us is the slowest rank's mean per call; algbw is size/time in GB/s
 * (1e9), busbw algbw*2(n-1)/n. Each size runs a few untimed calls first,
 * then as many timed ones as collbench would (200 below 1 MiB, 20 below 16
 * MiB, else 5), then one call whose result is checked everywhere.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int iters_for(long bytes) {
	if (bytes < (1L << 20)) return 200;
	if (bytes < (16L << 20)) return 20;
	return 5;
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, n;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	long min = argc > 1 ? atol(argv[1]) : 8, max = argc > 2 ? atol(argv[2]) : 1L << 26;
	if (min < 4) min = 4;
	if (rank == 0) printf("# size count time_us algbw busbw wrong\n");
	for (long size = min; size <= max; size *= 2) {
		long count = size / 4;
		float *in = malloc(count * sizeof *in), *out = malloc(count * sizeof *out);
		if (!in || !out) MPI_Abort(MPI_COMM_WORLD, 1);
		for (long i = 0; i < count; i++) in[i] = (float)(rank + 1 + i % 7);
		int iters = iters_for(size);
		for (int w = 0; w < 3; w++) MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		for (int i = 0; i < iters; i++) MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		double mine = (MPI_Wtime() - t0) / iters, slowest;
		MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
		long wrong = 0, wrongAll = 0;
		for (long i = 0; i < count; i++) {
			float want = (float)(n * (n + 1) / 2 + n * (i % 7));
			if (out[i] != want) wrong++;
		}
		MPI_Reduce(&wrong, &wrongAll, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		if (rank == 0) {
			double us = slowest * 1e6, algbw = size / slowest / 1e9;
			printf("%ld %ld %.2f %.3f %.3f %ld\n", size, count, us, algbw, algbw * 2 * (n - 1) / n, wrongAll);
			fflush(stdout);
		}
		free(in);
		free(out);
	}
	MPI_Finalize();
	return 0;
}

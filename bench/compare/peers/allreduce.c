/* MPI side of bench/compare: MPI_Allreduce on float32 with MPI_SUM over a
 * sweep of sizes, built at run time with Open MPI's or MPICH's mpicc.
 *
 * usage: allreduce MINBYTES MAXBYTES ITERS   (ITERS 0: collbench's default)
 *
 * Rank 0 prints one line per size: bytes, elements, the slowest rank's mean
 * time per call in microseconds, and the number of wrong elements summed over
 * ranks. compare derives the bandwidths from the time itself.
 *
 * The first size is run untimed for a while before the sweep, so the first
 * timed row is not the one that pays for connection setup and cold caches. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int iterations(long long bytes, int fixed) {
	if (fixed > 0)
		return fixed;
	if (bytes < (1LL << 20))
		return 200;
	return bytes < (16LL << 20) ? 20 : 5;
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc != 4) {
		if (rank == 0)
			fprintf(stderr, "usage: %s MINBYTES MAXBYTES ITERS\n", argv[0]);
		MPI_Finalize();
		return 2;
	}
	long long lo = atoll(argv[1]), hi = atoll(argv[2]);
	int fixed = atoi(argv[3]);
	if (lo < 4 || hi < lo) {
		if (rank == 0)
			fprintf(stderr, "allreduce: want 4 <= MINBYTES <= MAXBYTES\n");
		MPI_Finalize();
		return 2;
	}
	size_t maxn = (size_t)(hi / 4);
	float *in = malloc(maxn * sizeof(float)), *out = malloc(maxn * sizeof(float));
	if (!in || !out) {
		fprintf(stderr, "allreduce: cannot allocate %lld bytes twice\n", hi);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	/* Small integers: every sum is exact in float32 whatever the order. */
	for (size_t i = 0; i < maxn; i++)
		in[i] = (float)((rank + 1) * (int)(i % 7 + 1));
	float ranksum = (float)size * (size + 1) / 2;

	for (int i = 0; i < 100; i++)
		MPI_Allreduce(in, out, (int)(lo / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);

	for (long long b = lo; b <= hi; b *= 2) {
		int n = (int)(b / 4), iters = iterations(b, fixed);
		for (int i = 0; i < 3; i++)
			MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		MPI_Barrier(MPI_COMM_WORLD);
		double t = MPI_Wtime();
		for (int i = 0; i < iters; i++)
			MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		t = (MPI_Wtime() - t) / iters;
		long long wrong = 0, allwrong;
		for (int i = 0; i < n; i++)
			if (out[i] != ranksum * (float)(i % 7 + 1))
				wrong++;
		double slowest;
		MPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		MPI_Reduce(&wrong, &allwrong, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		if (rank == 0)
			printf("%lld %d %.3f %lld\n", b, n, slowest * 1e6, allwrong);
		fflush(stdout);
	}
	free(in);
	free(out);
	/* Everyone past the sweep before any rank finalizes: MPICH over UCX
	 * TCP once left rank 0 spinning in MPI_Finalize while rank 1 waited
	 * in its process manager. */
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Finalize();
	return 0;
}

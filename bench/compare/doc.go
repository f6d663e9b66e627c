// Command compare runs collbench and the Open MPI peer benchmark
// (../shared/peers/run-mpi.sh: MPI_Allreduce, float32, sum) for the same
// ranks and sizes back to back on the same machine, and prints per size
// both times and bandwidths and their ratios, with the machine's memory
// bandwidth for scale:
//
//	go run ./bench/compare -n 2 -transport tcp -min 8 -max 64M -repeat 3
//
// Timings on a shared machine drift from minute to minute, so only runs
// taken side by side compare; -repeat N takes N pairs, alternating which
// side goes first, and reports the median per size. See bench/README.md
// for running it on a cluster (-ours and -theirs command templates).
package main

// Command compare measures gocoll's allreduce (collbench) beside Open MPI's
// and MPICH's MPI_Allreduce and PyTorch's gloo backend, float32 sum, for
// the same ranks and sizes on the same machine in one run:
//
//	cd bench && go run ./compare -n 2 -transport tcp -min 8 -max 64M -repeat 3
//
// Each round runs every side once, the first side rotating from round to
// round, because timings on a shared machine drift from minute to minute
// and only runs taken side by side compare. It prints per size each side's
// time (median, fastest and slowest round), busbw, and gocoll's time over
// each peer's.
//
// -variant NAME:GOCOLL_X=V adds gocoll itself as a side, run with those
// settings, to measure what a setting costs, runs alternating (an empty
// -peers leaves gocoll against itself only):
//
//	go run ./bench/compare -peers '' -variant encrypt:GOCOLL_ENCRYPT=1 -hosts 2 -rate 1gbit -min 64K -max 16M -repeat 5
//
// The peers' benchmark programs live in peers/ and are carried inside
// this binary: peers/allreduce.c is compiled with mpicc.openmpi and
// mpicc.mpich into a temporary directory, peers/gloo_allreduce.py runs
// under a python3 that imports torch. See bench/README.md.
package main

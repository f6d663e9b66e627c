// Command compare runs collbench and a peer's allreduce benchmark (Open
// MPI, MPICH or PyTorch's gloo, float32 sum; the peers' programs and
// script are in bench/compare/peers) for the same ranks and sizes back to
// back on the same machine, and prints per size both times and bandwidths
// and their ratios, with the machine's memory bandwidth for scale:
//
//	go run ./bench/compare -n 2 -transport tcp -peer mpich -min 8 -max 64M -repeat 3
//
// Timings on a shared machine drift from minute to minute, so only runs
// taken side by side compare; -repeat N takes N pairs, alternating which
// side goes first, and reports the median per size. See bench/README.md
// for running it on a cluster (-ours and -theirs command templates).
package main

// Command collbench measures gocoll's collectives in the columns of
// nccl-tests, so that its rows compare with those of the MPI program
// bench/compare runs beside it (compare/peers/allreduce.c). It lives in
// the bench module, which keeps its plotting library out of gocoll's own
// module; build it from this directory:
//
//	cd bench && go build -o collbench . && go build -o grun github.com/gocoll/gocoll/cmd/grun
//	grun -n 2 ./collbench -op allreduce -dtype float32 -redop sum -min 8 -max 64M
//	grun -n 2 ./collbench -op allgather -format json > tcp.json
//	collbench plot tcp.json shm.json -o busbw.png
//
// Only rank 0 prints: one header row, then one row per size with size(B),
// count, type, redop, root, time(us), algbw(GB/s), busbw(GB/s), #wrong and
// the algorithm. time is the slowest rank's mean per iteration; algbw is
// size/time; busbw scales algbw by the nccl-tests factor of the collective
// (allreduce 2(n-1)/n, allgather and reducescatter (n-1)/n, broadcast 1)
// so that figures compare across rank counts. size follows nccl-tests
// too: the bytes of the larger buffer (allgather's recv, reducescatter's
// send). With -check (the default) every result is verified against known
// inputs; any wrong element makes collbench exit 1.
//
// Every collective is one entry in opTable (ops.go): a new collective in
// package comm is benchmarkable once it has an entry there.
package main

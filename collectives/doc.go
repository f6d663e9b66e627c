// Package collectives holds the collective algorithms, written once against
// the small transport.Transport interface so that every transport runs the
// same code: ring reduce-scatter/allgather allreduce (bandwidth-optimal,
// chunked into slot-sized segments so that reduction overlaps the wire),
// recursive doubling allreduce (latency-optimal), Rabenseifner's
// halving-doubling allreduce and a binomial-tree allreduce, binomial-tree
// and pipelined-chain broadcast, dissemination barrier, ring allgather
// and reduce-scatter (and their v-variants), binomial-tree reduce, linear
// gather and scatter, and pairwise all-to-all.
//
// One allreduce reads memory rather than messages: SingleCopyAllReduce,
// for buffers every rank of one host maps (comm.Alloc), reduces each
// rank's block straight from its peers' buffers, in one pass over them
// (reduce.ReduceN), and copies the others from their owners, with the
// ring's bits; the transport carries only its header and three empty
// messages per peer (window.go). SingleCopyAllReduceRead does the same
// where the peers' buffers are read rather than mapped (a PeerReader:
// comm.Register's process_vm_readv). Below Options.SingleCopyMin bytes,
// and for what the single copy does not take, the table's other rows
// choose (choose.go).
//
// A Mux shares one transport between several communicators and
// point-to-point lanes (see Mux and Channel): sub-communicators are Groups
// over Channels.
//
// Buffers are bytes plus an element type; the reduction kernels are in
// internal/reduce. Received data is reduced or copied straight out of the
// transport's receive slot, never staged. Every call puts a 32-byte header
// (sequence number, collective, algorithm, element type, count, op, root)
// on the first message it sends to each peer; the receiver checks it
// against its own call before using any data, so ranks that disagree get
// ErrMismatch saying what each side called instead of corrupted results.
//
// Results are bitwise identical on every rank: the ring reduces each chunk
// exactly once and copies it, and recursive doubling always puts the lower
// rank's operand first.
//
// Float16 and BFloat16 Sum, Avg and Prod keep their partial results in
// float32, on the wire too, and round to 16 bits once (wide.go says what
// travels in which width for each algorithm); the call header says so,
// so that ranks that would disagree on the width get ErrMismatch. The
// single copy takes them too (reduce.ReduceNWide), with the bits of the
// ring that keeps float32 partials.
//
// ExactSum (reduce.ExactSum) on a float type is the exact sum of every
// rank's input rounded once: the same bits for any rank count, algorithm,
// transport or arrival order. It has one algorithm of its own (exact.go),
// whatever the table or GOCOLL_ALGO pick for other ops: a pairwise
// reduce-scatter that brings each block's n raw inputs, in the element
// width, to the block's owner, which sums them exactly (reduce.Exact),
// then a direct allgather of the rounded blocks. The algorithms that
// forward partial results would need exact partials on the wire (up to
// 277 bits per float32 element as fixed point, 2100 per float64); raw
// inputs need no wider format and one exact computation per element.
// On integers ExactSum is Sum.
//
// What is public, and why. Programs use package comm, which picks the
// transport, agrees the job's plan and names the culprit of a failure;
// this package is its engine. It is public for one use that comm does not
// serve: a program that brings a transport of its own (a fabric gocoll
// has none for, or ranks in one process as in ExampleGroup_ownTransport)
// and wants gocoll's algorithms over it. For that use NewGroup, Options
// and the Group's collectives are the contract, on bytes plus an element
// type (DType: Float32, Int64, BFloat16, ...) and an operation (Op: Sum,
// Avg, ExactSum, ...), named here; the transport's side of it is the
// contract of package transport. The rest that is exported (Mux and
// Channel, the flight recorder's Records, CallNumber, DescribeCall,
// Disagree, ParseAlgos, Traffic) is what comm and its internal packages
// need from here, exported because they live in other packages; it
// follows their needs.
package collectives

// Package collectives holds the collective algorithms, written once against
// the small transport.Transport interface so that every transport runs the
// same code: ring reduce-scatter/allgather allreduce (bandwidth-optimal,
// chunked into slot-sized segments so that reduction overlaps the wire),
// recursive doubling allreduce (latency-optimal), binomial-tree and
// pipelined-chain broadcast, dissemination barrier, and ring allgather and
// reduce-scatter.
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
package collectives

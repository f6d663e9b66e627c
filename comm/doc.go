// Package comm is gocoll's public API: a Communicator joins a job of N
// ranks, and generic collectives operate on ordinary Go slices: AllReduce,
// Broadcast, Reduce, Gather, Scatter, AllGather and ReduceScatter (and
// their v-variants with a count per rank), AllToAll and AllToAllV, and
// Barrier; AllReduceMany fuses many small allreduces into one.
//
// Every collective has an Async form returning a Request (Wait, Test):
// collectives run in the order they were issued on the rank, blocking
// and async alike, so several may be in flight while the program
// computes. Split and SubCommunicator make sub-communicators that share
// the job's connections, and whose collectives may run concurrently with
// the job's from other goroutines. Send, Recv and SendRecv carry tagged
// point-to-point messages (Send's documentation has the matching,
// blocking and deadlock rules).
//
// Init reads the job from the launcher's environment (grun, torchrun-style,
// Open MPI or Slurm) and connects every rank to every other through the
// rendezvous store; New takes an explicit Config instead. Every collective
// takes a context first and returns an error, never panics. A bad argument
// is refused before anything is sent (ErrInvalid, ErrUnsupported); a
// failure part-way through (a peer lost, the context ended, ranks that
// called different collectives) leaves the ranks out of step. Either way,
// on a job of several ranks, the communicator is broken, the other ranks
// are told (their call fails naming this rank), and every later call fails
// at once with ErrBroken and the original cause. Collectives on one
// communicator run one at a time and must be issued in the same order on
// every rank.
//
// A call that failed part-way returns a *CallError: one line naming the
// rank, the call as every rank numbers it and the root cause, often on
// another rank ("rank 2 gave up: ...", "rank 3 killed by signal
// SIGKILL"), with that rank in Culprit and the whole chain this rank saw
// in Err. errors.Is matches the sentinel of the root cause on every rank
// (ErrMismatch, ErrTimeout) as well as what this rank saw (ErrPeerLost).
//
// An elastic job (GOCOLL_ELASTIC=1, grun --elastic) can lose ranks and
// go on: a failure ends the communicator it happened on but leaves the
// connections to the live ranks up, and the survivors call Shrink, which
// agrees on who is left through the rendezvous store and returns a
// communicator of them over the same connections (see Shrink and
// examples/elastic).
//
// The collectives are package functions, generic over the element type
// (AllReduce[T]), because Go methods cannot have type parameters of their
// own; what takes no buffer of elements (Barrier, Split, Close, Abort) is
// a method.
//
// A program that exits on an error should close the communicator first:
// log.Fatal and os.Exit skip deferred calls, so the peers would see this
// rank die (ErrPeerLost) instead of leave. Return the error from a
// function that defers Close, and exit after it (see the exit example).
//
// Reproducible sums: a float Sum depends on the order of its additions,
// so its bits change with the rank count, the algorithm, the transport
// and, for some algorithms, the order messages arrive in. ExactSum is the
// exact sum of every rank's input rounded once: the same bits under any
// of those, and as accurate as the type allows (see ExactSum for the
// special values, what it costs and ExampleExactSum for the difference;
// docs/exactsum.md for the method and measurements).
//
// The algorithms (package collectives) are chosen by message size and rank
// count, can be forced with GOCOLL_ALGO (except ExactSum's), and say what
// they chose with GOCOLL_DEBUG=info. They run over a transport (package transport); which
// one is picked by GOCOLL_TRANSPORT.
package comm

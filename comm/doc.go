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
// Open MPI or Slurm) and joins it through the rendezvous store, where the
// ranks exchange their addresses; New takes an explicit Config instead.
// The link between two ranks (a TCP connection, a shared-memory ring, an
// RDMA queue pair) is made when a call first needs it, Init's own first
// allreduce included, so a rank connects only to the partners its
// algorithms use (GOCOLL_TCP_CONNECT=eager and GOCOLL_RDMA_CONNECT=eager
// link every pair at Init instead). Every collective
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
// Memory from Alloc (collective: every rank asks for the same count)
// is read by the ranks of one host in place: AllReduce of a buffer in it
// skips the shared-memory transport's copy into its rings and out of
// them, each rank reducing its block straight from every peer's buffer
// and copying the other blocks from their owners, for the ring's bits
// and about half the memory traffic (docs/traffic.md), from 1 MiB (the
// job's plan); a smaller buffer takes the usual path. Free, or Close,
// gives it back. A buffer of the program's own, registered with
// Register (collective too), takes the same path on 2 ranks on Linux
// where the kernel lets the ranks read each other's memory
// (process_vm_readv): each rank copies its peers' blocks into a small
// scratch piece and reduces them from there, one copy where the rings
// take two.
//
// The collectives are package functions, generic over the element type
// (AllReduce[T]), because Go methods cannot have type parameters of their
// own; what takes no buffer of elements (Barrier, Split, Close, Abort) is
// a method.
//
// A program that exits on an error should close the communicator first:
// log.Fatal and os.Exit skip deferred calls, so the peers would see this
// rank die (ErrPeerLost) instead of leave. Return the error from a
// function that defers Close, and exit after it:
//
//	func main() {
//		if err := run(context.Background()); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1) // after run's deferred Close
//		}
//	}
//
//	func run(ctx context.Context) error {
//		c, err := comm.Init(ctx)
//		if err != nil {
//			return err
//		}
//		defer c.Close()
//		// ... the program's collectives ...
//		return comm.AllReduce(ctx, c, grads, comm.Sum)
//	}
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
//
// # Environment
//
// The library reads these variables once, at Init (internal/settings
// parses them all, in one place); a value out of range fails Init with
// an error naming the variable and wrapping ErrInvalid. Those marked
// "job-wide" form the job's plan with the transports' cost and message
// size: every rank must set them alike, or Init fails on the rank that
// differs, naming the setting (ErrEnv); a replacement that joins an
// elastic job takes the job's plan, whatever its own settings say.
//
//   - GOCOLL_TRANSPORT: auto (default), tcp, shm or rdma. Job-wide.
//   - GOCOLL_ALGO: force algorithms, "ring" or "allreduce=rd,broadcast=chain". Job-wide.
//   - GOCOLL_HALF_ACCUM: float32 (default) or 16bit, how Float16 and BFloat16 sums accumulate. Job-wide.
//   - GOCOLL_ELASTIC: 1 for an elastic job (see Shrink, Grow). Job-wide.
//   - GOCOLL_INSECURE: 1 lets a job without GRUN_TOKEN span hosts under torchrun or Open MPI, on a trusted network (warned once); unset, such a job admits ranks of other hosts only under Slurm, by their munge credentials.
//   - GOCOLL_MUNGE_SOCKET: munged's socket, if not munge's default; under Slurm a job without GRUN_TOKEN proves its ranks to the store with munge credentials.
//   - GOCOLL_ENCRYPT: 1 seals every TCP frame with AES-256-GCM under keys from each connection's authentication by the job's token (GRUN_TOKEN, or without one the secret the store hands each rank); shared memory stays plaintext and RDMA is not used. Job-wide.
//   - GOCOLL_TCP_CONNECT: lazy (default: links as calls need them), warm (the first partners at Init) or eager (all at Init). Job-wide.
//   - GOCOLL_RDMA_CONNECT: lazy (default) or eager. Job-wide.
//   - GOCOLL_TIMEOUT: the bound of Init and of a call whose context has none, from 1ms to 8760h, as 90s, 2m or seconds (default 10m).
//   - GOCOLL_STALL: how long a call may make no progress before the stall report, from 1ms to 8760h, or off (default 1m).
//   - GOCOLL_TRACE: write each rank's calls to this file (%r is the rank).
//   - GOCOLL_SPIN: how long a waiting call busy-polls, 0 to 1s.
//   - GOCOLL_SHM_NONTEMPORAL: auto (default: each shared-memory link measures), on or off: non-temporal stores for messages of 4 KiB or more into shared memory (amd64).
//   - GOCOLL_IB_DEV and GOCOLL_IB_GID_INDEX (0..255): the RDMA device and GID.
//   - GOCOLL_DEBUG: warn (default), info (the choices made and why), debug, or off.
//   - GOCOLL_SIMD: auto (default), off, sse2, avx2 or avx512: the reduction kernels, read at start-up.
//   - GOCOLL_FAKE_HOSTS: for tests, a number of hosts or a list of ranks per host (1,4) to pretend the ranks run on.
//   - GOCOLL_QUICK and GOCOLL_CONFORMANCE: for the project's own tests.
package comm

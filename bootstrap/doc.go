// Package bootstrap is how the ranks of a job find each other.
//
// A job has one rendezvous store: a tiny key/value server over TCP whose Get
// waits until the key is Put. grun serves it for the jobs it launches; under
// other launchers (torchrun, mpirun, srun) rank 0 serves it. Every rank
// publishes where its peers can reach it (a listening address per
// transport: a TCP port, shared memory's Unix socket, RDMA's connection
// port) and reads a peer's record when a call first needs that peer; the
// transports then make the link themselves. RDMA's queue pair numbers,
// GIDs and memory keys never go through the store: two ranks exchange
// them over a short token-authenticated TCP connection of their own
// (transport/rdma/links.go). Every connection to the
// store proves it holds the per-job token (see internal/auth) before it may
// read or write anything, and every frame's length is checked before it is
// read, so strangers and garbage are refused without disturbing the job.
// A job without a token admits, on the store's host, only processes of its
// own user (their sockets' owners, from /proc/net/tcp); under torchrun and
// Open MPI its store also refuses ranks of other hosts unless
// GOCOLL_INSECURE=1 (a trusted network), and under Slurm it admits those
// that send a munge credential bound to their connection (admit.go,
// munge.go). Every admitted rank gets the job's secret, which its links
// authenticate with (Client.LinkToken). The ranks check the store back:
// on their host it must be a process of their user, under Slurm one of
// another host must prove itself with munge as well. At most 256 connections
// authenticate at once (internal/gate). docs/security.md has the whole
// picture.
//
// Environment: GRUN_TOKEN (at least 16 bytes), GOCOLL_INSECURE ("1" lets
// a job without a token span hosts; rank 0 warns once),
// GOCOLL_MUNGE_SOCKET (munged's socket, if not munge's default),
// GOCOLL_HALF_ACCUM.
//
// FromEnv reads a launcher's environment into a Config; programs that set
// everything themselves fill a Config directly. Tests run N ranks as
// goroutines of one process: start a Server on 127.0.0.1:0 and give each
// goroutine a Config with its rank and the server's address.
//
// What is public, and why: the store (Listen, Serve, Dial and the Server
// and Client they return), which a launcher of the program's own serves
// and a communicator's Config names; FromEnv and Config, through which
// comm.New takes a job of the program's making; and two counts that are
// observability, not test hooks. Server.Refused is how many connections
// the store turned away (strangers, wrong tokens): grun reports it when a
// job ends, and a launcher of the program's own can too. Requests is how
// many requests this process has sent to a store, the load a rank puts
// on it (bench/scale reports it per job size; docs/scale.md);
// it counts the whole process because a communicator's clients are out
// of the program's reach.
package bootstrap

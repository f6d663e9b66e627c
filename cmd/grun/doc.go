// Command grun launches a gocoll job: N processes (ranks) of one program,
// like mpirun or torchrun do.
//
// Usage:
//
//	grun -n N [-x VAR[=val]]... [--tag-output] [--timeout D] [--grace D] [-v] PROG [ARGS...]
//	grun [-n N] -H host1:4,host2:4 | --hostfile FILE [--rsh CMD] [--iface NAME] ... PROG [ARGS...]
//	grun -n N --elastic MIN:MAX --job-file FILE ... PROG [ARGS...]
//	grun --join FILE [-x VAR[=val]]... [-v] PROG [ARGS...]
//
// grun serves the job's rendezvous store (package bootstrap) on 127.0.0.1
// with a fresh random token, then starts every rank with GRUN_RANK,
// GRUN_SIZE, GRUN_LOCAL_RANK, GRUN_LOCAL_SIZE, GRUN_ADDR and GRUN_TOKEN set,
// which is what bootstrap.FromEnv reads. -x adds variables of one's own:
// -x VAR=val sets one, -x VAR copies it from grun's environment.
//
// The ranks' stdout and stderr are forwarded whole line by whole line, with
// "[RANK] " in front under --tag-output. Each rank runs in a process group
// of its own and grun signals whole groups, so what a rank starts (the
// binary that "go run" builds, a script's commands) stops with it.
//
// When a rank fails, --timeout expires, grun gets SIGINT, SIGTERM or
// SIGHUP, or its output is closed, grun stops every rank (with the signal it
// got, or SIGTERM; SIGKILL for those still running --grace later) and exits
// with the first failing rank's status (128+signal if it was killed), 124
// on timeout, 128+signal when signalled (141 for the closed output), 127
// when PROG cannot be started and 2 on bad usage. If every rank exits 0, so
// does grun. "grun --help" gives the details.
//
// With -H, --hostfile or inside a Slurm allocation, ranks are placed on the
// hosts by slot (or --map-by node) and remote ones started through ssh (or
// --rsh) as one shell command that keeps rsh's stdin as the rank's
// lifeline: signals travel down it and its end kills the rank. The store
// then listens on the address routed toward the other hosts (or --iface /
// GOCOLL_IFACE's). The repository's docs/operations.md documents
// multi-host jobs and running under srun, mpirun and torchrun without
// grun; its README has the recipes CI runs. grun needs a Unix system.
//
// An elastic job (--elastic MIN:MAX) with --job-file also takes ranks
// that "grun --join FILE PROG" starts on other hosts or terminals, up to
// MAX live: the job's grun gives each its rank and environment over a
// connection authenticated with the job's token, which also carries the
// rank's output, exit status and signals (join.go). A joiner refused
// (MAX ranks live, or the job ending) exits 3.
package main

package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/gocoll/gocoll/internal/auth"
	"github.com/gocoll/gocoll/internal/logging"
	"github.com/gocoll/gocoll/internal/settings"
)

// ErrEnv reports a missing, malformed or contradictory launch environment.
var ErrEnv = errors.New("bad launch environment")

// Config is everything a rank needs to join its job.
type Config struct {
	Rank int // this process's rank, in [0, Size)
	Size int // number of ranks

	// LocalRank and LocalSize place the rank among those on its host; -1
	// when the launcher did not say.
	LocalRank int
	LocalSize int

	// Addr is the rendezvous store, "host:port".
	Addr string
	// Serve makes this rank run the store at Addr itself (rank 0 does when
	// the launcher is not grun, which serves its own).
	Serve bool
	// Token is the per-job secret that every connection proves it holds.
	// Empty means an unauthenticated job (any process that can reach the
	// ports can join); grun always sets one.
	Token []byte

	// Source names where the configuration came from, for messages.
	Source string
	// Job identifies the launcher's job ("slurm 812.0", "openmpi
	// 1791819777", "torchrun RUN attempt 0"), empty when it gave none. The
	// store refuses ranks of another job, which a shared port and no token
	// would otherwise let in.
	Job string

	// Insecure lets a job without a Token span hosts (GOCOLL_INSECURE=1),
	// for a trusted network. Without it the store rank 0 serves for
	// torchrun or Open MPI refuses ranks of other hosts when there is no
	// token: nothing else would keep strangers of those hosts out.
	Insecure bool

	// Munge has each store connection of a job without a Token prove its
	// rank with a munge credential (see docs/security.md), and the store
	// rank 0 serves admit ranks of other hosts that do: FromEnv sets it
	// under Slurm. MungeSocket is munged's socket (GOCOLL_MUNGE_SOCKET;
	// empty: munge's default).
	Munge       bool
	MungeSocket string

	// HalfAccum is how Float16 and BFloat16 Sum, Avg and Prod accumulate:
	// "" or "float32" (the default) keeps partial results in float32 and
	// rounds once; "16bit" rounds every partial result to 16 bits (less
	// accurate, faster from three ranks on). It is part of the job's
	// plan, so every rank must say the same: comm's Init fails on a rank
	// that differs from rank 0, naming the setting (ErrEnv), and the
	// others learn why it gave up. FromEnv reads GOCOLL_HALF_ACCUM.
	HalfAccum string
}

// HalfAccum values.
const (
	HalfAccumFloat32 = "float32"
	HalfAccum16Bit   = "16bit"
)

// Validate checks the configuration for values that cannot work.
func (c Config) Validate() error {
	src := c.Source
	if src == "" {
		src = "config"
	}
	switch {
	case c.Size < 1:
		return fmt.Errorf("%s: size %d, want at least 1: %w", src, c.Size, ErrEnv)
	case c.Rank < 0 || c.Rank >= c.Size:
		return fmt.Errorf("%s: rank %d out of range for size %d: %w", src, c.Rank, c.Size, ErrEnv)
	case c.LocalSize > 0 && (c.LocalRank < 0 || c.LocalRank >= c.LocalSize):
		return fmt.Errorf("%s: local rank %d out of range for local size %d: %w", src, c.LocalRank, c.LocalSize, ErrEnv)
	case c.LocalSize > c.Size:
		return fmt.Errorf("%s: local size %d larger than size %d: %w", src, c.LocalSize, c.Size, ErrEnv)
	}
	if c.HalfAccum != "" && c.HalfAccum != HalfAccumFloat32 && c.HalfAccum != HalfAccum16Bit {
		return fmt.Errorf("%s: GOCOLL_HALF_ACCUM=%q: want %s or %s: %w", src, c.HalfAccum, HalfAccumFloat32, HalfAccum16Bit, ErrEnv)
	}
	if c.Size > 1 || c.Serve {
		if c.Addr == "" {
			return fmt.Errorf("%s: no rendezvous address: %w", src, ErrEnv)
		}
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			return fmt.Errorf("%s: rendezvous address %q: %v: %w", src, c.Addr, err, ErrEnv)
		}
	}
	return nil
}

// DefaultMasterPort is torchrun's default rendezvous port, used when
// MASTER_ADDR is set without MASTER_PORT.
const DefaultMasterPort = "29500"

// FromEnv reads the configuration a launcher left in the environment.
// lookup is os.LookupEnv in programs and a map in tests. Each launcher sets:
//
//	grun:     GRUN_RANK GRUN_SIZE GRUN_LOCAL_RANK GRUN_LOCAL_SIZE GRUN_ADDR GRUN_TOKEN
//	torchrun: RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT (+ TORCHELASTIC_RUN_ID)
//	Open MPI: OMPI_COMM_WORLD_RANK _SIZE _LOCAL_RANK _LOCAL_SIZE (+ OMPI_MCA_ess_base_jobid)
//	Slurm:    SLURM_PROCID SLURM_NTASKS SLURM_LOCALID (+ SLURM_JOB_ID SLURM_STEP_ID)
//
// A shell, a batch script or an outer launcher may leave another launcher's
// variables behind, so FromEnv prefers the launcher that started this very
// process, known by a variable only it sets for its tasks, innermost first:
// grun, then srun's task itself (SLURM_TASK_PID is this process), torchrun
// (TORCHELASTIC_RUN_ID), Open MPI, srun (SLURM_STEP_ID).
// RANK and WORLD_SIZE without torchrun's marks count only when no launcher
// is found; beside a Slurm batch step it is not clear which was meant, and
// FromEnv fails listing both. A Slurm batch script (SLURM_PROCID without
// SLURM_STEP_ID) running a program of several tasks without srun fails at
// once: none of its tasks will ever come.
//
// Under grun, grun serves the store. Otherwise rank 0 serves it at GRUN_ADDR
// if set, else at MASTER_ADDR:MASTER_PORT (MASTER_PORT defaults to
// DefaultMasterPort); a job of one rank with neither needs no store. Under
// torchrun's static rendezvous the agent holds MASTER_PORT itself
// (TORCHELASTIC_USE_AGENT_STORE=True), so GRUN_ADDR is required there.
//
// GRUN_TOKEN is honoured whatever the launcher. Its text is the token, byte
// for byte: it is not hex- or otherwise decoded and not trimmed (grun sets 64
// hex digits and keys its store with those same 64 bytes), so every rank and
// the store must be given the identical string. It must have at least
// auth.MinTokenLen (16) bytes: the handshake leaks nothing a dictionary can
// be checked against offline, but every connection may try one guess.
//
// Every error wraps ErrEnv and names the variable to fix.
func FromEnv(lookup func(string) (string, bool)) (Config, error) {
	e := envReader{lookup: lookup}
	var c Config
	var v envVars
	src, err := pickLauncher(&e)
	if err != nil {
		return Config{}, err
	}
	switch src {
	case "grun":
		c.Source = "grun"
		v = envVars{"GRUN_RANK", "GRUN_SIZE", "GRUN_LOCAL_RANK", "GRUN_LOCAL_SIZE", "GRUN_ADDR"}
		c.Rank = e.int("GRUN_RANK", true)
		c.Size = e.int("GRUN_SIZE", true)
		c.LocalRank = e.intOr("GRUN_LOCAL_RANK", -1)
		c.LocalSize = e.intOr("GRUN_LOCAL_SIZE", -1)
		c.Addr = e.str("GRUN_ADDR", true)
	case "torchrun":
		c.Source = "torchrun"
		v = envVars{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", ""}
		c.Rank = e.int("RANK", true)
		c.Size = e.int("WORLD_SIZE", true)
		c.LocalRank = e.intOr("LOCAL_RANK", -1)
		c.LocalSize = e.intOr("LOCAL_WORLD_SIZE", -1)
		if e.has("TORCHELASTIC_RUN_ID") {
			c.Job = "torchrun " + e.str("TORCHELASTIC_RUN_ID", false) + " attempt " + e.str("TORCHELASTIC_RESTART_COUNT", false)
		}
		if e.has("TORCHELASTIC_RUN_ID") && c.Size > 1 && !e.has("GRUN_ADDR") &&
			strings.EqualFold(e.str("TORCHELASTIC_USE_AGENT_STORE", false), "true") {
			return Config{}, fmt.Errorf("torchrun: static rendezvous (TORCHELASTIC_USE_AGENT_STORE=True): the torchrun agent serves its own store at MASTER_ADDR:MASTER_PORT (%s:%s), so gocoll's cannot be there: "+
				"set GRUN_ADDR=HOST:PORT (rank 0's host, another free port) for every rank, or run torchrun with --standalone or --rdzv_backend c10d: %w",
				e.str("MASTER_ADDR", false), e.str("MASTER_PORT", false), ErrEnv)
		}
		c.Addr, v.addr = e.served()
	case "openmpi":
		c.Source = "openmpi"
		v = envVars{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", ""}
		c.Rank = e.int("OMPI_COMM_WORLD_RANK", true)
		c.Size = e.int("OMPI_COMM_WORLD_SIZE", true)
		c.LocalRank = e.intOr("OMPI_COMM_WORLD_LOCAL_RANK", -1)
		c.LocalSize = e.intOr("OMPI_COMM_WORLD_LOCAL_SIZE", -1)
		switch {
		case e.has("OMPI_MCA_ess_base_jobid"):
			c.Job = "openmpi " + e.str("OMPI_MCA_ess_base_jobid", false)
		case e.has("PMIX_NAMESPACE"):
			c.Job = "openmpi " + e.str("PMIX_NAMESPACE", false)
		}
		c.Addr, v.addr = e.served()
	case "slurm", "slurm batch":
		c.Source = "slurm"
		v = envVars{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "", ""}
		c.Rank = e.int("SLURM_PROCID", true)
		c.Size = e.int("SLURM_NTASKS", true)
		c.LocalRank = e.intOr("SLURM_LOCALID", -1)
		c.LocalSize = -1 // SLURM_NTASKS_PER_NODE may be "2(x3)"; not needed
		if src == "slurm batch" && e.err == nil && c.Size > 1 {
			return Config{}, fmt.Errorf("slurm: SLURM_PROCID=%d SLURM_NTASKS=%d without SLURM_STEP_ID: this is the batch script itself, not one of the job's tasks, and the other %d will never come: "+
				"start the program with srun (\"srun ./prog\") in the script: %w", c.Rank, c.Size, c.Size-1, ErrEnv)
		}
		if e.has("SLURM_STEP_ID") {
			c.Job = "slurm " + e.str("SLURM_JOB_ID", false) + "." + e.str("SLURM_STEP_ID", false)
		}
		c.Addr, v.addr = e.served()
	}
	if err := readShared(&c, lookup); err != nil {
		return Config{}, err
	}
	if c.Source != "grun" {
		// A lone rank given no address runs without a store (Validate
		// would refuse to serve one at no address).
		c.Serve = c.Rank == 0 && c.Addr != ""
	}
	if e.err != nil {
		return Config{}, fmt.Errorf("%s: %w", c.Source, e.err)
	}
	if c.Size > 1 && c.Addr == "" {
		return Config{}, fmt.Errorf("%s: rank %d of %d but no rendezvous address: set GRUN_ADDR or MASTER_ADDR (and MASTER_PORT): %w",
			c.Source, c.Rank, c.Size, ErrEnv)
	}
	if err := v.check(c, &e); err != nil {
		return Config{}, fmt.Errorf("%s: %w", c.Source, err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// readShared reads the variables FromEnv honours whatever the launcher.
// Its errors wrap ErrEnv and name the variable.
func readShared(c *Config, lookup func(string) (string, bool)) error {
	if tok, ok := lookup("GRUN_TOKEN"); ok {
		if len(tok) < auth.MinTokenLen {
			return fmt.Errorf("GRUN_TOKEN has %d characters, want at least %d (random, e.g. GRUN_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')): %w",
				len(tok), auth.MinTokenLen, ErrEnv)
		}
		c.Token = []byte(tok)
	}
	var err error
	if c.HalfAccum, err = settings.HalfAccum(settings.Lookup(lookup)); err != nil {
		return fmt.Errorf("%s: %w: %w", c.Source, err, ErrEnv)
	}
	if c.Insecure, err = settings.Insecure(settings.Lookup(lookup)); err != nil {
		return fmt.Errorf("%s: %w: %w", c.Source, err, ErrEnv)
	}
	if c.MungeSocket, err = settings.MungeSocket(settings.Lookup(lookup)); err != nil {
		return fmt.Errorf("%s: %w: %w", c.Source, err, ErrEnv)
	}
	// Slurm's nodes run munged (its AuthType=auth/munge): a job without a
	// token proves its ranks with it.
	c.Munge = c.Source == "slurm" && len(c.Token) == 0
	return nil
}

// launcherMarks are the variables by which pickLauncher recognises a
// launcher; a process with none of them set was started by hand.
var launcherMarks = []string{"GRUN_RANK", "GRUN_SIZE", "RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}

// Singleton is the configuration of a job of one rank, and true, when
// lookup holds none of the variables by which FromEnv recognises a
// launcher (GRUN_RANK, GRUN_SIZE, RANK, WORLD_SIZE, OMPI_COMM_WORLD_RANK,
// SLURM_PROCID): a program started by hand runs alone, as MPI's singleton
// init runs it, with no store. Otherwise it returns false, and FromEnv
// reads the launcher's variables (or says what is wrong with them).
func Singleton(lookup func(string) (string, bool)) (Config, bool) {
	e := envReader{lookup: lookup}
	for _, k := range launcherMarks {
		if e.has(k) {
			return Config{}, false
		}
	}
	c := Config{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, Source: "singleton"}
	// An unreadable GOCOLL_HALF_ACCUM fails Init, which reads every
	// setting (internal/settings), in the same words.
	readShared(&c, lookup)
	return c, true
}

// pickLauncher says which launcher's variables to read: "grun", "torchrun",
// "openmpi", "slurm" (a task srun started) or "slurm batch" (the batch
// script itself). See FromEnv for the order and why.
func pickLauncher(e *envReader) (string, error) {
	grun := e.has("GRUN_RANK") || e.has("GRUN_SIZE")
	torch := e.has("RANK") || e.has("WORLD_SIZE")
	elastic := torch && e.has("TORCHELASTIC_RUN_ID")
	ompi := e.has("OMPI_COMM_WORLD_RANK")
	slurm := e.has("SLURM_PROCID")
	step := slurm && e.has("SLURM_STEP_ID")
	// srun's task itself: slurmstepd sets SLURM_TASK_PID to the pid of the
	// process it started, so whatever else is set (OMPI_* from an mpirun
	// around the job script, RANK from a shell profile) is left over.
	task := step && e.str("SLURM_TASK_PID", false) == strconv.Itoa(os.Getpid())
	var src string
	switch {
	case grun:
		return "grun", nil // grun drops inherited GRUN_* for its ranks
	case task:
		src = "slurm"
	case elastic:
		src = "torchrun"
	case ompi:
		src = "openmpi"
	case step:
		src = "slurm"
	case torch && slurm:
		return "", fmt.Errorf("two launchers' variables and neither started this process: %s and %s (a Slurm batch script, no SLURM_STEP_ID): "+
			"start the program with srun, or unset the ones that are left over: %w", e.found("RANK", "WORLD_SIZE"), e.found("SLURM_PROCID", "SLURM_NTASKS"), ErrEnv)
	case torch:
		return "torchrun", nil
	case slurm:
		return "slurm batch", nil
	default:
		return "", fmt.Errorf("no launcher environment found (set by grun: GRUN_RANK, GRUN_SIZE, GRUN_ADDR; "+
			"or torchrun style RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; or Open MPI's OMPI_COMM_WORLD_RANK; "+
			"or Slurm's SLURM_PROCID), or pass an explicit Config: %w", ErrEnv)
	}
	var ignored []string
	if torch && src != "torchrun" {
		ignored = append(ignored, e.found("RANK", "WORLD_SIZE"))
	}
	if ompi && src != "openmpi" {
		ignored = append(ignored, e.found("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"))
	}
	if slurm && src != "slurm" {
		ignored = append(ignored, e.found("SLURM_PROCID", "SLURM_NTASKS"))
	}
	if len(ignored) > 0 {
		logging.L().Info("launcher: ignoring variables another launcher left", "launcher", src, "ignored", strings.Join(ignored, " "))
	}
	return src, nil
}

// envVars names the variables a launcher's Config fields came from, so that
// a value out of range is reported by the name the user has to fix. An empty
// name means the launcher has no such variable.
type envVars struct {
	rank, size, localRank, localSize, addr string
}

// check is Validate in terms of the variables: it runs before Validate so
// the first problem found is reported by name.
func (v envVars) check(c Config, e *envReader) error {
	localRank := v.localRank != "" && e.has(v.localRank)
	localSize := v.localSize != "" && e.has(v.localSize)
	switch {
	case c.Size < 1:
		return fmt.Errorf("%s=%d, want at least 1: %w", v.size, c.Size, ErrEnv)
	case c.Rank < 0:
		return fmt.Errorf("%s=%d is negative: %w", v.rank, c.Rank, ErrEnv)
	case c.Rank >= c.Size:
		return fmt.Errorf("%s=%d out of range for %s=%d: %w", v.rank, c.Rank, v.size, c.Size, ErrEnv)
	case localSize && c.LocalSize < 1:
		return fmt.Errorf("%s=%d, want at least 1: %w", v.localSize, c.LocalSize, ErrEnv)
	case localSize && c.LocalSize > c.Size:
		return fmt.Errorf("%s=%d larger than %s=%d: %w", v.localSize, c.LocalSize, v.size, c.Size, ErrEnv)
	case localRank && c.LocalRank < 0:
		return fmt.Errorf("%s=%d is negative: %w", v.localRank, c.LocalRank, ErrEnv)
	case localRank && localSize && c.LocalRank >= c.LocalSize:
		return fmt.Errorf("%s=%d out of range for %s=%d: %w", v.localRank, c.LocalRank, v.localSize, c.LocalSize, ErrEnv)
	case localRank && c.LocalRank >= c.Size:
		return fmt.Errorf("%s=%d out of range for %s=%d: %w", v.localRank, c.LocalRank, v.size, c.Size, ErrEnv)
	}
	if c.Addr != "" {
		_, port, err := net.SplitHostPort(c.Addr)
		if err != nil {
			return fmt.Errorf("%s=%q: %v: %w", v.addr, c.Addr, err, ErrEnv)
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return fmt.Errorf("%s=%q: port %q is not a port number from 1 to 65535: %w", v.addr, c.Addr, port, ErrEnv)
		}
	}
	return nil
}

// envReader collects the first error so the switch above stays readable.
type envReader struct {
	lookup func(string) (string, bool)
	err    error
}

// found lists the variables ks as NAME=VALUE, for messages.
func (e *envReader) found(ks ...string) string {
	var b []string
	for _, k := range ks {
		if v, ok := e.lookup(k); ok {
			b = append(b, k+"="+strconv.Quote(v)[1:len(strconv.Quote(v))-1])
		}
	}
	return strings.Join(b, " ")
}

func (e *envReader) has(k string) bool {
	v, ok := e.lookup(k)
	return ok && strings.TrimSpace(v) != ""
}

func (e *envReader) str(k string, required bool) string {
	v, ok := e.lookup(k)
	v = strings.TrimSpace(v)
	if (!ok || v == "") && required && e.err == nil {
		e.err = fmt.Errorf("%s is not set: %w", k, ErrEnv)
	}
	return v
}

func (e *envReader) int(k string, required bool) int {
	v := e.str(k, required)
	if v == "" {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil && e.err == nil {
		e.err = fmt.Errorf("%s=%q is not an integer: %w", k, v, ErrEnv)
	}
	return n
}

func (e *envReader) intOr(k string, def int) int {
	if !e.has(k) {
		return def
	}
	return e.int(k, false)
}

// served is the rendezvous address when rank 0 serves the store, and the
// variable it came from.
func (e *envReader) served() (addr, from string) {
	if e.has("GRUN_ADDR") {
		return e.str("GRUN_ADDR", false), "GRUN_ADDR"
	}
	if !e.has("MASTER_ADDR") {
		return "", ""
	}
	port := DefaultMasterPort
	if e.has("MASTER_PORT") {
		port = e.str("MASTER_PORT", false)
		if n, err := strconv.ParseUint(port, 10, 16); (err != nil || n == 0) && e.err == nil {
			e.err = fmt.Errorf("MASTER_PORT=%q is not a port number from 1 to 65535: %w", port, ErrEnv)
		}
	}
	return net.JoinHostPort(e.str("MASTER_ADDR", false), port), "MASTER_ADDR"
}

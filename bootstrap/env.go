package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
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
}

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
// lookup is os.LookupEnv in programs and a map in tests. The launchers are
// tried in this order, the first whose rank variable is set wins:
//
//	grun:     GRUN_RANK GRUN_SIZE GRUN_LOCAL_RANK GRUN_LOCAL_SIZE GRUN_ADDR GRUN_TOKEN
//	torchrun: RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
//	Open MPI: OMPI_COMM_WORLD_RANK _SIZE _LOCAL_RANK _LOCAL_SIZE
//	Slurm:    SLURM_PROCID SLURM_NTASKS SLURM_LOCALID
//
// Under grun, grun serves the store. Otherwise rank 0 serves it at GRUN_ADDR
// if set, else at MASTER_ADDR:MASTER_PORT (MASTER_PORT defaults to
// DefaultMasterPort); a job of one rank with neither needs no store.
//
// GRUN_TOKEN is honoured whatever the launcher. Its text is the token, byte
// for byte: it is not hex- or otherwise decoded and not trimmed (grun sets 64
// hex digits and keys its store with those same 64 bytes), so every rank and
// the store must be given the identical string.
//
// Every error wraps ErrEnv and names the variable to fix.
func FromEnv(lookup func(string) (string, bool)) (Config, error) {
	e := envReader{lookup: lookup}
	var c Config
	var v envVars
	switch {
	case e.has("GRUN_RANK") || e.has("GRUN_SIZE"):
		c.Source = "grun"
		v = envVars{"GRUN_RANK", "GRUN_SIZE", "GRUN_LOCAL_RANK", "GRUN_LOCAL_SIZE", "GRUN_ADDR"}
		c.Rank = e.int("GRUN_RANK", true)
		c.Size = e.int("GRUN_SIZE", true)
		c.LocalRank = e.intOr("GRUN_LOCAL_RANK", -1)
		c.LocalSize = e.intOr("GRUN_LOCAL_SIZE", -1)
		c.Addr = e.str("GRUN_ADDR", true)
	case e.has("RANK") || e.has("WORLD_SIZE"):
		c.Source = "torchrun"
		v = envVars{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", ""}
		c.Rank = e.int("RANK", true)
		c.Size = e.int("WORLD_SIZE", true)
		c.LocalRank = e.intOr("LOCAL_RANK", -1)
		c.LocalSize = e.intOr("LOCAL_WORLD_SIZE", -1)
		c.Addr, v.addr = e.served()
	case e.has("OMPI_COMM_WORLD_RANK"):
		c.Source = "openmpi"
		v = envVars{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", ""}
		c.Rank = e.int("OMPI_COMM_WORLD_RANK", true)
		c.Size = e.int("OMPI_COMM_WORLD_SIZE", true)
		c.LocalRank = e.intOr("OMPI_COMM_WORLD_LOCAL_RANK", -1)
		c.LocalSize = e.intOr("OMPI_COMM_WORLD_LOCAL_SIZE", -1)
		c.Addr, v.addr = e.served()
	case e.has("SLURM_PROCID"):
		c.Source = "slurm"
		v = envVars{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "", ""}
		c.Rank = e.int("SLURM_PROCID", true)
		c.Size = e.int("SLURM_NTASKS", true)
		c.LocalRank = e.intOr("SLURM_LOCALID", -1)
		c.LocalSize = -1 // SLURM_NTASKS_PER_NODE may be "2(x3)"; not needed
		c.Addr, v.addr = e.served()
	default:
		return Config{}, fmt.Errorf("no launcher environment found (set by grun: GRUN_RANK, GRUN_SIZE, GRUN_ADDR; "+
			"or torchrun style RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; or Open MPI's OMPI_COMM_WORLD_RANK; "+
			"or Slurm's SLURM_PROCID), or pass an explicit Config: %w", ErrEnv)
	}
	if tok, ok := lookup("GRUN_TOKEN"); ok {
		c.Token = []byte(tok)
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

// Package settings reads every GOCOLL_* environment variable the library
// uses, in one place, with range checks, into one value: the row of
// variables for each says how it is parsed and what it accepts. A value
// out of range or unreadable is an *Error naming the variable, never a
// silent default: comm's Init fails with it (wrapping ErrInvalid).
//
// It is a package of its own, and imports nothing of gocoll's, because
// the packages that read a variable before any Init (the reduction
// kernels pick their instruction set at start-up from GOCOLL_SIMD, the
// logger its level from GOCOLL_DEBUG on first use) sit below comm; they
// call the one-variable functions here, which parse with the same row
// as Read. What a setting means is documented in comm's package doc; the
// variables that every rank must set alike also form the job's plan
// (internal/plan).
//
// GOCOLL_ALGO is kept as written: its words are the collectives' names,
// which comm checks with collectives.ParseAlgos as it builds the plan.
// The launchers' own variables (GRUN_*, torchrun's, Open MPI's, Slurm's)
// are read in one place too: bootstrap.FromEnv.
package settings

import (
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"
)

// Lookup finds an environment variable: os.LookupEnv, or a map in tests.
type Lookup func(name string) (string, bool)

// Error is a variable set to a value out of range or unreadable.
type Error struct {
	Var, Value string
	Want       string // what it accepts
}

func (e *Error) Error() string { return fmt.Sprintf("%s=%q: want %s", e.Var, e.Value, e.Want) }

// Settings are the variables' values; the zero value of each field is
// what an unset variable means, but Debug's (see defaults).
type Settings struct {
	Transport string        // GOCOLL_TRANSPORT: auto (unset), tcp, shm or rdma
	Algo      string        // GOCOLL_ALGO, as written (see the package doc)
	Timeout   time.Duration // GOCOLL_TIMEOUT; 0: unset
	// Stall is GOCOLL_STALL, if StallSet: 0 is off.
	Stall    time.Duration
	StallSet bool
	Trace    string // GOCOLL_TRACE: a file name pattern
	// Spin is GOCOLL_SPIN, if SpinSet: -1 is no busy-polling at all.
	Spin           time.Duration
	SpinSet        bool
	SHMNonTemporal string // GOCOLL_SHM_NONTEMPORAL: auto (unset), on or off
	TCPConnect     string // GOCOLL_TCP_CONNECT: lazy (unset), warm or eager
	RDMAConnect    string // GOCOLL_RDMA_CONNECT: lazy (unset) or eager
	IBDev          string // GOCOLL_IB_DEV
	IBGIDIndex     int    // GOCOLL_IB_GID_INDEX
	Elastic        bool   // GOCOLL_ELASTIC
	Encrypt        bool   // GOCOLL_ENCRYPT: seal every TCP frame (AES-GCM)
	Insecure       bool   // GOCOLL_INSECURE: a job without GRUN_TOKEN may span hosts
	MungeSocket    string // GOCOLL_MUNGE_SOCKET: munged's socket; "" is munge's default
	FakeHosts      FakeHosts
	HalfAccum      string     // GOCOLL_HALF_ACCUM: "" (unset), float32 or 16bit
	Debug          slog.Level // GOCOLL_DEBUG: warn (unset), info, debug, off
	SIMD           string     // GOCOLL_SIMD: auto (unset), off, sse2, avx2, avx512
	Quick          bool       // GOCOLL_QUICK, for the project's tests
	Conformance    string     // GOCOLL_CONFORMANCE, for the project's tests
}

// FakeHosts is GOCOLL_FAKE_HOSTS, for tests: Hosts hosts with the ranks
// in contiguous blocks, or PerHost[i] ranks on host i, in rank order.
// Both zero: unset.
type FakeHosts struct {
	Hosts   int
	PerHost []int
}

// DebugOff is the level GOCOLL_DEBUG=off sets: above every level the
// library logs at.
const DebugOff = slog.LevelError + 4

// Timeouts and stall bounds accept from 1 ms to a year: below, a bound
// no call can meet (1e-12 would otherwise round to nothing, and nothing
// used to mean the default); above, a duration that overflows once
// converted (1e10 seconds) or that means "never" (inf), for which the
// library has no setting: a job that hangs for good costs more than one
// that fails.
const (
	minBound = time.Millisecond
	maxBound = 365 * 24 * time.Hour
)

// variable is one row: a variable's name and how its value, trimmed
// and not empty, is parsed into s.
type variable struct {
	name  string
	parse func(v string, s *Settings) error
}

var variables = []variable{
	{"GOCOLL_TRANSPORT", func(v string, s *Settings) error {
		return oneOf(v, &s.Transport, "auto, tcp, shm or rdma", "auto", "tcp", "shm", "rdma")
	}},
	{"GOCOLL_ALGO", func(v string, s *Settings) error { s.Algo = v; return nil }},
	{"GOCOLL_TIMEOUT", func(v string, s *Settings) error {
		d, ok := bound(v)
		if !ok {
			return want("a duration from 1ms to 8760h, such as 90s, 2m or 90 (seconds)")
		}
		s.Timeout = d
		return nil
	}},
	{"GOCOLL_STALL", func(v string, s *Settings) error {
		s.StallSet = true
		if v == "off" || v == "0" {
			s.Stall = 0
			return nil
		}
		d, ok := bound(v)
		if !ok {
			return want("a duration from 1ms to 8760h, such as 60s, or off")
		}
		s.Stall = d
		return nil
	}},
	{"GOCOLL_TRACE", func(v string, s *Settings) error { s.Trace = v; return nil }},
	{"GOCOLL_SPIN", func(v string, s *Settings) error {
		d, err := time.ParseDuration(v)
		if v == "0" {
			d, err = 0, nil
		}
		if err != nil || d < 0 || d > time.Second {
			return want("a duration from 0 to 1s, such as 0, 20us or 1ms")
		}
		s.Spin, s.SpinSet = d, true
		if d == 0 {
			s.Spin = -1
		}
		return nil
	}},
	{"GOCOLL_SHM_NONTEMPORAL", func(v string, s *Settings) error {
		return oneOf(v, &s.SHMNonTemporal, "auto, on or off", "auto", "on", "off")
	}},
	{"GOCOLL_TCP_CONNECT", func(v string, s *Settings) error {
		return oneOf(v, &s.TCPConnect, "warm, lazy or eager", "lazy", "warm", "eager")
	}},
	{"GOCOLL_RDMA_CONNECT", func(v string, s *Settings) error {
		return oneOf(v, &s.RDMAConnect, "lazy or eager", "lazy", "eager")
	}},
	{"GOCOLL_IB_DEV", func(v string, s *Settings) error { s.IBDev = v; return nil }},
	{"GOCOLL_IB_GID_INDEX", func(v string, s *Settings) error {
		i, err := strconv.Atoi(v)
		if err != nil || i < 0 || i > 255 {
			return want("a GID table index 0..255")
		}
		s.IBGIDIndex = i
		return nil
	}},
	{"GOCOLL_ELASTIC", func(v string, s *Settings) error { return flag(v, &s.Elastic) }},
	{"GOCOLL_ENCRYPT", func(v string, s *Settings) error { return flag(v, &s.Encrypt) }},
	{"GOCOLL_INSECURE", func(v string, s *Settings) error { return flag(v, &s.Insecure) }},
	{"GOCOLL_MUNGE_SOCKET", func(v string, s *Settings) error {
		if !strings.HasPrefix(v, "/") || len(v) > 107 || strings.ContainsRune(v, 0) {
			return want("the absolute path of munged's socket, at most 107 bytes (munge -S)")
		}
		s.MungeSocket = v
		return nil
	}},
	{"GOCOLL_FAKE_HOSTS", func(v string, s *Settings) error {
		if !strings.Contains(v, ",") {
			k, err := strconv.Atoi(v)
			if err != nil || k < 1 || k > 1<<20 {
				return want("a number of hosts or a list of ranks per host (1,4)")
			}
			s.FakeHosts = FakeHosts{Hosts: k}
			return nil
		}
		var per []int
		for i, f := range strings.Split(v, ",") {
			k, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || k < 1 || k > 1<<20 {
				return want(fmt.Sprintf("a positive number of ranks for host %d", i))
			}
			per = append(per, k)
		}
		s.FakeHosts = FakeHosts{PerHost: per}
		return nil
	}},
	{"GOCOLL_HALF_ACCUM", func(v string, s *Settings) error {
		return oneOf(v, &s.HalfAccum, "float32 or 16bit", "float32", "16bit")
	}},
	{"GOCOLL_DEBUG", func(v string, s *Settings) error {
		l, err := ParseDebug(v)
		s.Debug = l
		return err
	}},
	{"GOCOLL_SIMD", func(v string, s *Settings) error {
		return oneOf(v, &s.SIMD, "one of off, sse2, avx2, avx512, auto", "auto", "off", "sse2", "avx2", "avx512")
	}},
	{"GOCOLL_QUICK", func(v string, s *Settings) error { return flag(v, &s.Quick) }},
	{"GOCOLL_CONFORMANCE", func(v string, s *Settings) error { s.Conformance = v; return nil }},
}

// flag reads a switch: 1, true, on or yes; 0, false, off or no.
func flag(v string, dst *bool) error {
	switch strings.ToLower(v) {
	case "0", "false", "off", "no":
		*dst = false
	case "1", "true", "on", "yes":
		*dst = true
	default:
		return want("1 or 0")
	}
	return nil
}

// wantError is a row's refusal before the variable's name and value are
// added (see read).
type wantError string

func (w wantError) Error() string { return string(w) }

func want(what string) error { return wantError(what) }

// oneOf sets *dst to v, lower-cased, if it is one of words.
func oneOf(v string, dst *string, what string, words ...string) error {
	v = strings.ToLower(v)
	for _, w := range words {
		if v == w {
			*dst = v
			return nil
		}
	}
	return want(what)
}

// bound parses a timeout: a Go duration ("90s", "2m") or seconds
// ("90", "1.5"), within [minBound, maxBound].
func bound(v string) (time.Duration, bool) {
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(secs) || secs < minBound.Seconds() || secs > maxBound.Seconds() {
			return 0, false
		}
		return time.Duration(secs * float64(time.Second)), true
	}
	d, err := time.ParseDuration(v)
	return d, err == nil && d >= minBound && d <= maxBound
}

// defaults is Settings with nothing set: slog's zero level is info,
// and the library is quiet by default.
func defaults() Settings { return Settings{Debug: slog.LevelWarn} }

// Names lists every variable the library reads, in the order of Read.
func Names() []string {
	out := make([]string, len(variables))
	for i, v := range variables {
		out[i] = v.name
	}
	return out
}

// Read parses every variable lookup finds. The first one out of range
// is the error (an *Error).
func Read(lookup Lookup) (Settings, error) {
	s := defaults()
	for _, v := range variables {
		if err := read(lookup, v, &s); err != nil {
			return s, err
		}
	}
	return s, nil
}

// read parses one row into s, if its variable is set and not blank.
func read(lookup Lookup, v variable, s *Settings) error {
	raw, ok := lookup(v.name)
	if !ok || strings.TrimSpace(raw) == "" {
		return nil
	}
	if err := v.parse(strings.TrimSpace(raw), s); err != nil {
		return &Error{Var: v.name, Value: raw, Want: err.Error()}
	}
	return nil
}

// one parses the single variable name, for the packages that need it
// before any Init.
func one(lookup Lookup, name string) (Settings, error) {
	s := defaults()
	for _, v := range variables {
		if v.name == name {
			return s, read(lookup, v, &s)
		}
	}
	return s, fmt.Errorf("settings: no variable %s", name) // a typo in this package, caught by its tests
}

// SIMD is GOCOLL_SIMD alone, for the reduction kernels' start-up.
func SIMD(lookup Lookup) (string, error) {
	s, err := one(lookup, "GOCOLL_SIMD")
	return s.SIMD, err
}

// Debug is GOCOLL_DEBUG alone, for the logger.
func Debug(lookup Lookup) (slog.Level, error) {
	s, err := one(lookup, "GOCOLL_DEBUG")
	return s.Debug, err
}

// HalfAccum is GOCOLL_HALF_ACCUM alone, for bootstrap.FromEnv and
// comm.NewLocal, which put it in the job's Config.
func HalfAccum(lookup Lookup) (string, error) {
	s, err := one(lookup, "GOCOLL_HALF_ACCUM")
	return s.HalfAccum, err
}

// Insecure is GOCOLL_INSECURE, which bootstrap reads with the launcher's
// variables (it decides who the store admits, before any Init).
func Insecure(lookup Lookup) (bool, error) {
	s, err := one(lookup, "GOCOLL_INSECURE")
	return s.Insecure, err
}

// MungeSocket is GOCOLL_MUNGE_SOCKET, which bootstrap reads with the
// launcher's variables (a rank under Slurm proves itself to the store
// with a munge credential).
func MungeSocket(lookup Lookup) (string, error) {
	s, err := one(lookup, "GOCOLL_MUNGE_SOCKET")
	return s.MungeSocket, err
}

// Quick is GOCOLL_QUICK alone, and Conformance GOCOLL_CONFORMANCE, for
// the project's tests (internal/testmode).
func Quick(lookup Lookup) bool {
	s, _ := one(lookup, "GOCOLL_QUICK")
	return s.Quick
}

// Conformance: see Quick.
func Conformance(lookup Lookup) string {
	s, _ := one(lookup, "GOCOLL_CONFORMANCE")
	return s.Conformance
}

// ParseDebug reads a GOCOLL_DEBUG value (or grun's -debug flag): warn
// or empty (the default), info, debug (or trace), off (or none).
func ParseDebug(v string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "warn":
		return slog.LevelWarn, nil
	case "info":
		return slog.LevelInfo, nil
	case "debug", "trace":
		return slog.LevelDebug, nil
	case "off", "none":
		return DebugOff, nil
	}
	return slog.LevelWarn, want("info, debug, warn or off")
}

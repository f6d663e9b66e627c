// Package plan is what every rank of a job must decide alike, decided
// once for the job: which algorithms GOCOLL_ALGO forces, how 16-bit sums
// accumulate, how the ranks connect, what a message costs on the job's
// links, and so how long a stage of the pipelined hierarchical allreduce
// is. The collectives of a call are a function of the plan and
// the call (collectives.Group.Choice), so ranks that share a plan choose
// alike by construction.
//
// comm builds a rank's plan from its settings (internal/settings, or the
// Options given in code), and Init agrees on it through the rendezvous
// store: rank 0 publishes its settings half, and a rank whose own differ
// fails Init naming the setting and both values (Diff). The other half,
// the link cost and the message size, comes from the transports after
// they connect, agreed with one allreduce (the costliest link and the
// smallest message of any rank). Shrink, Grow and Split inherit the
// plan; an elastic job publishes it in the store, and a replacement
// that joins later takes the job's plan from there, not its own view.
//
// The package is apart from comm because it has one job, a value and
// its encoding, which the joiner and the members must read alike; the
// agreement itself, which needs the store and the transports, is comm's.
package plan

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/gocoll/gocoll/collectives"
)

// ErrBadPlan is wrapped by Decode's errors: a plan in the store that
// this build cannot read.
var ErrBadPlan = errors.New("unreadable plan")

// Plan is the job-wide plan. The first fields are settings, which every
// rank must give alike; the last two are facts of the job's transports,
// agreed at Init.
type Plan struct {
	// Algos is the GOCOLL_ALGO in force, canonical (Canon): "" for none.
	Algos string
	// HalfAccum is GOCOLL_HALF_ACCUM: "float32" or "16bit".
	HalfAccum string
	// Transport is the transport asked for (GOCOLL_TRANSPORT): auto,
	// tcp, shm or rdma. What auto picks follows from the job's layout,
	// which every rank reads alike from the store.
	Transport string
	// Elastic is GOCOLL_ELASTIC (or WithElastic).
	Elastic bool
	// Encrypt is GOCOLL_ENCRYPT (or tcp.Options.Encrypt): every TCP
	// frame sealed.
	Encrypt bool
	// TCPConnect and RDMAConnect are GOCOLL_TCP_CONNECT (lazy, warm,
	// eager) and GOCOLL_RDMA_CONNECT (lazy, eager).
	TCPConnect, RDMAConnect string

	// StepCostly says a message on some rank's links costs markedly more
	// than its bytes (transport.StepCoster), so the tables prefer fewer,
	// longer steps (Options).
	StepCostly bool
	// MaxMessage is the smallest message size of any rank's transport,
	// at which every rank cuts long buffers.
	MaxMessage int
}

// Costly-step tuning (see the rules of collectives): the ring from 3 to
// 4 ranks only once each of its steps carries ringChunk bytes, and
// recursive doubling on 4, 8, 16... ranks only up to smallPow2 bytes.
const (
	ringChunk = 256 << 10
	smallPow2 = 16 << 10
)

// hierMessages is how many of the job's messages (their payload,
// collectives.Segment of MaxMessage) make one
// stage of the pipelined hierarchical allreduce (collectives.HierPipe):
// a stage short enough that the phase inside a host it waits for at
// either end is small beside the whole call, long enough that each
// leader's share of it still fills several messages between hosts.
const hierMessages = 4

// SingleCopyMin is the smallest allreduce, in bytes, of memory from
// comm.Alloc that reads the ranks' buffers in place
// (collectives.Options.SingleCopyMin): below it the usual path, whose
// one exchange beats the single copy's three rounds of messages
// (bench/results/onecopy-crossover.txt). The same for every job: it
// matters only over shm, where the ranks share a host.
const SingleCopyMin = 1 << 20

// SingleCopyReadRanks is the most ranks on which the single copy takes a
// buffer that comm.Register made readable, which the peers copy with
// process_vm_readv, several times slower a byte than the rings' copies:
// on 4 ranks it measured slower than the usual path, on 2 faster
// (collectives.Options.SingleCopyReadRanks;
// bench/results/register-ab.txt).
const SingleCopyReadRanks = 2

// Options are the collectives' options that follow from p: every rank
// with the same plan gets the same. The caller adds what is its own (the
// logger, the hosts, the recorder).
func (p Plan) Options() (collectives.Options, error) {
	algos, err := collectives.ParseAlgos(p.Algos)
	if err != nil {
		return collectives.Options{}, err
	}
	o := collectives.Options{Algos: algos, Round16: p.HalfAccum == "16bit", SingleCopyMin: SingleCopyMin, SingleCopyReadRanks: SingleCopyReadRanks}
	if p.StepCostly {
		o.RingChunk, o.SmallAllReducePow2 = ringChunk, smallPow2
	}
	// Decided here, from the message size every rank agreed on, never
	// from a rank's own transport: ranks that cut stages differently
	// would exchange different bytes.
	if p.MaxMessage > 0 {
		o.HierSegment = hierMessages * collectives.Segment(p.MaxMessage)
	}
	return o, nil
}

// Canon is the canonical form of a parsed GOCOLL_ALGO: kind=algo pairs
// in kind order, Auto left out, so that ranks that say the same in
// different words agree.
func Canon(algos map[collectives.Kind]collectives.Algo) string {
	kinds := make([]collectives.Kind, 0, len(algos))
	for k, a := range algos {
		if a != collectives.Auto {
			kinds = append(kinds, k)
		}
	}
	slices.Sort(kinds)
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = k.String() + "=" + algos[k].String()
	}
	return strings.Join(parts, ",")
}

// field is one line of the encoding: the setting's name (its
// environment variable, for those that have one) and its value.
type field struct{ name, value string }

func (p Plan) fields() []field {
	return []field{
		{"GOCOLL_ALGO", p.Algos},
		{"GOCOLL_HALF_ACCUM", p.HalfAccum},
		{"GOCOLL_TRANSPORT", p.Transport},
		{"GOCOLL_ELASTIC", strconv.FormatBool(p.Elastic)},
		{"GOCOLL_ENCRYPT", strconv.FormatBool(p.Encrypt)},
		{"GOCOLL_TCP_CONNECT", p.TCPConnect},
		{"GOCOLL_RDMA_CONNECT", p.RDMAConnect},
		{"step cost", strconv.FormatBool(p.StepCostly)},
		{"message size", strconv.Itoa(p.MaxMessage)},
	}
}

// Settings is p with the transports' half cleared: what a rank knows
// before it connects.
func (p Plan) Settings() Plan {
	p.StepCostly, p.MaxMessage = false, 0
	return p
}

// Encode is p as the store holds it: one "name=value" line per field.
func (p Plan) Encode() string {
	var b strings.Builder
	for _, f := range p.fields() {
		b.WriteString(f.name + "=" + f.value + "\n")
	}
	return b.String()
}

// Decode reads Encode's form.
func Decode(s string) (Plan, error) {
	var p Plan
	vals := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			return Plan{}, fmt.Errorf("%w: line %q", ErrBadPlan, line)
		}
		vals[name] = value
	}
	want := p.fields()
	if len(vals) != len(want) {
		return Plan{}, fmt.Errorf("%w: %d fields, want %d (a rank of another gocoll version?)", ErrBadPlan, len(vals), len(want))
	}
	for _, f := range want {
		if _, ok := vals[f.name]; !ok {
			return Plan{}, fmt.Errorf("%w: no %s", ErrBadPlan, f.name)
		}
	}
	var err1, err2, err3, err4 error
	p.Algos, p.HalfAccum, p.Transport = vals["GOCOLL_ALGO"], vals["GOCOLL_HALF_ACCUM"], vals["GOCOLL_TRANSPORT"]
	p.TCPConnect, p.RDMAConnect = vals["GOCOLL_TCP_CONNECT"], vals["GOCOLL_RDMA_CONNECT"]
	p.Elastic, err1 = strconv.ParseBool(vals["GOCOLL_ELASTIC"])
	p.Encrypt, err4 = strconv.ParseBool(vals["GOCOLL_ENCRYPT"])
	p.StepCostly, err2 = strconv.ParseBool(vals["step cost"])
	p.MaxMessage, err3 = strconv.Atoi(vals["message size"])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return Plan{}, fmt.Errorf("%w: %w", ErrBadPlan, err)
	}
	if _, err := p.Options(); err != nil {
		return Plan{}, fmt.Errorf("%w: %w", ErrBadPlan, err)
	}
	return p, nil
}

// Diff names the first field in which p and q differ, with p's value
// and q's, or returns ok false if they agree.
func (p Plan) Diff(q Plan) (name, pv, qv string, ok bool) {
	pf, qf := p.fields(), q.fields()
	for i := range pf {
		if pf[i].value != qf[i].value {
			return pf[i].name, pf[i].value, qf[i].value, true
		}
	}
	return "", "", "", false
}

// Fingerprint is a hash of the whole plan, for comparing plans across
// ranks in one number.
func (p Plan) Fingerprint() uint64 {
	h := fnv.New64a()
	h.Write([]byte(p.Encode()))
	return h.Sum64()
}

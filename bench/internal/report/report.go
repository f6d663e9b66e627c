package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrFormat reports a file that is not a collbench result.
var ErrFormat = errors.New("not a collbench result")

// Meta describes where and how a result was measured, so that a plot or a
// comparison can say which run is which.
type Meta struct {
	Tool string `json:"tool"` // "collbench", or the peer's name for converted results
	Date string `json:"date"` // RFC 3339, UTC
	Host string `json:"host"`
	// The machine, and this rank's share of it: a rank grun bound to one
	// CPU sees runtime.NumCPU() = 1 on a machine of many.
	Cores      int      `json:"cores"`                // the machine's online CPUs
	CPUModel   string   `json:"cpu_model,omitempty"`  // as the CPU names itself
	BoundCPUs  string   `json:"bound_cpus,omitempty"` // the CPUs rank 0 may run on, "1" or "0-3" as a list
	GOMAXPROCS int      `json:"gomaxprocs,omitempty"` // rank 0's
	Ranks      int      `json:"ranks"`
	Op         string   `json:"op"`
	DType      string   `json:"dtype"`
	Redop      string   `json:"redop"`
	Root       int      `json:"root"`
	Transport  string   `json:"transport"`
	Algo       string   `json:"algo"`
	Iters      int      `json:"iters"` // 0: chosen by size
	Warmup     int      `json:"warmup"`
	Check      bool     `json:"check"`
	GoVersion  string   `json:"go_version,omitempty"`
	Version    string   `json:"version,omitempty"` // git describe, or the build's VCS revision
	Args       []string `json:"args,omitempty"`
	Label      string   `json:"label,omitempty"` // overrides the label drawn from the other fields
}

// Row is one size of a sweep, in nccl-tests' columns.
type Row struct {
	Size   int64   `json:"size"`  // bytes of the larger buffer (nccl-tests convention)
	Count  int64   `json:"count"` // elements in Size
	Type   string  `json:"type"`
	Redop  string  `json:"redop"`
	Root   int     `json:"root"`
	TimeUS float64 `json:"time_us"` // slowest rank's mean per iteration
	AlgBW  float64 `json:"algbw"`   // GB/s (1e9), Size/time
	BusBW  float64 `json:"busbw"`   // GB/s, AlgBW times the collective's factor
	Wrong  int64   `json:"wrong"`   // wrong elements over all ranks; -1: not checked
	Algo   string  `json:"algo"`
	Iters  int     `json:"iters"`
}

// Result is one run.
type Result struct {
	Meta Meta  `json:"meta"`
	Rows []Row `json:"rows"`
}

// Label names the run in a plot legend.
func (r Result) Label() string {
	m := r.Meta
	if m.Label != "" {
		return m.Label
	}
	s := fmt.Sprintf("%s %s %s %s, %d ranks", m.Tool, m.Transport, m.Op, m.DType, m.Ranks)
	if m.Version != "" {
		s += " @" + m.Version
	}
	return s
}

// ShortLabels names each result in a legend by what sets it apart from the
// others (tool and transport always; op, type, ranks, host and version
// where they differ): what they share goes in the plot's title. A result
// with its own Label keeps it.
func ShortLabels(results []Result) []string {
	differs := func(f func(Meta) string) bool {
		for _, r := range results[1:] {
			if f(r.Meta) != f(results[0].Meta) {
				return true
			}
		}
		return false
	}
	fields := []func(Meta) string{
		func(m Meta) string { return m.Op },
		func(m Meta) string { return m.DType },
		func(m Meta) string { return fmt.Sprintf("%d ranks", m.Ranks) },
		func(m Meta) string { return "on " + m.Host },
		func(m Meta) string {
			if m.Version == "" {
				return ""
			}
			return "@" + m.Version
		},
	}
	var vary []func(Meta) string
	for _, f := range fields {
		if len(results) > 0 && differs(f) {
			vary = append(vary, f)
		}
	}
	labels := make([]string, len(results))
	for i, r := range results {
		if r.Meta.Label != "" {
			labels[i] = r.Meta.Label
			continue
		}
		parts := []string{r.Meta.Tool, r.Meta.Transport}
		for _, f := range vary {
			if v := f(r.Meta); v != "" {
				parts = append(parts, v)
			}
		}
		labels[i] = strings.Join(parts, " ")
	}
	return labels
}

// Write writes r as indented JSON.
func Write(w io.Writer, r Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Decode reads one result and checks that it is one.
func Decode(rd io.Reader) (Result, error) {
	var r Result
	dec := json.NewDecoder(rd)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if r.Meta.Tool == "" || r.Meta.Op == "" {
		return Result{}, fmt.Errorf("%w: no meta.tool or meta.op", ErrFormat)
	}
	return r, nil
}

// ReadFile reads the result in the file at path.
func ReadFile(path string) (Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	r, err := Decode(f)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

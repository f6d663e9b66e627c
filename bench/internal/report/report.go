package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

// ErrFormat reports a file that is not a collbench result.
var ErrFormat = errors.New("not a collbench result")

// Meta describes where and how a result was measured, so that a plot or a
// comparison can say which run is which.
type Meta struct {
	Tool string `json:"tool"` // "collbench", or the peer's name for converted results
	Date string `json:"date"` // RFC 3339, UTC
	Host string `json:"host"`
	// The machine: every CPU online and its model, whatever this process
	// may use.
	Cores    int    `json:"cores"`
	CPUModel string `json:"cpu_model,omitempty"`
	// The binding: the CPUs rank 0 was allowed to run on (a cpulist,
	// "0-1,4") and its GOMAXPROCS, which Go derives from them.
	CPUs       string   `json:"cpus,omitempty"`
	GOMAXPROCS int      `json:"gomaxprocs,omitempty"`
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
	// MovedPerByte (collbench -traffic) is the bytes each rank moved
	// through memory per iteration, per byte of Size, the mean over the
	// ranks (see docs/traffic.md).
	MovedPerByte float64 `json:"moved_per_byte,omitempty"`
	// Over repeated runs merged by Merge: TimeUS is the median, these the
	// fastest and slowest run, Runs how many runs had this size.
	TimeMinUS float64 `json:"time_min_us,omitempty"`
	TimeMaxUS float64 `json:"time_max_us,omitempty"`
	Runs      int     `json:"runs,omitempty"`
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

// Merge folds repeated runs of one setup into one result: per size, the
// median time (the mean of the middle two for an even count), the fastest
// and slowest run's time, bandwidths scaled from the median, and the most
// wrong elements any run saw. The metadata is the first run's.
func Merge(runs []Result) Result {
	if len(runs) == 0 {
		return Result{}
	}
	out := Result{Meta: runs[0].Meta}
	bySize := map[int64][]Row{}
	var sizes []int64
	for _, r := range runs {
		for _, row := range r.Rows {
			if _, ok := bySize[row.Size]; !ok {
				sizes = append(sizes, row.Size)
			}
			bySize[row.Size] = append(bySize[row.Size], row)
		}
	}
	sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
	for _, s := range sizes {
		rows := bySize[s]
		sort.Slice(rows, func(i, j int) bool { return rows[i].TimeUS < rows[j].TimeUS })
		m := rows[len(rows)/2]
		if len(rows)%2 == 0 {
			m.TimeUS = (rows[len(rows)/2-1].TimeUS + m.TimeUS) / 2
		}
		m.TimeMinUS, m.TimeMaxUS, m.Runs = rows[0].TimeUS, rows[len(rows)-1].TimeUS, len(rows)
		for _, r := range rows {
			m.Wrong = max(m.Wrong, r.Wrong)
		}
		// Bandwidth is size over time: scale the row's own by its change of time.
		if med := m.TimeUS; med > 0 && rows[len(rows)/2].TimeUS > 0 {
			f := rows[len(rows)/2].TimeUS / med
			m.AlgBW, m.BusBW = rows[len(rows)/2].AlgBW*f, rows[len(rows)/2].BusBW*f
		}
		out.Rows = append(out.Rows, m)
	}
	return out
}

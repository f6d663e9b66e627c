//go:build unix

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/gocoll/gocoll/internal/privfile"
)

const mergeUsage = `Usage: grun --merge-trace [-o FILE.json] TRACE...

Merges the ranks' GOCOLL_TRACE files into one Chrome trace-event file
(open it in https://ui.perfetto.dev or chrome://tracing), one lane per rank
(and per sub-communicator). bench/timeline, in the gocoll repository's
bench module, draws that file as a PNG: a bar per call, coloured by kind.
`

// traced is one line of a GOCOLL_TRACE file (see internal/calltrace).
type traced struct {
	JobRank int    `json:"rank"`
	Comm    string `json:"comm"`
	Seq     uint64 `json:"seq"`
	Kind    string `json:"kind"`
	Algo    string `json:"algo"`
	Type    string `json:"type"`
	Count   int    `json:"count"`
	Op      string `json:"op"`
	Root    *int   `json:"root"`
	Bytes   int    `json:"bytes"`
	StartNs int64  `json:"start_ns"`
	EndNs   int64  `json:"end_ns"`
	Failed  bool   `json:"failed"`

	Start, End time.Time `json:"-"`
	Call       string    `json:"-"` // as errors name it
	Running    bool      `json:"-"`
}

// mergeTrace is grun --merge-trace.
func mergeTrace(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("grun --merge-trace", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out := fs.String("o", "trace.json", "the Chrome trace-event file to write")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, mergeUsage)
			return 0
		}
		fmt.Fprintf(stderr, "grun: --merge-trace: %v\n%s", err, mergeUsage)
		return exitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(stderr, "grun: --merge-trace: no trace files\n%s", mergeUsage)
		return exitUsage
	}
	var recs []traced
	for _, path := range fs.Args() {
		rs, err := readTrace(path)
		if err != nil {
			fmt.Fprintf(stderr, "grun: --merge-trace: %v\n", err)
			return exitUsage
		}
		recs = append(recs, rs...)
	}
	if len(recs) == 0 {
		fmt.Fprintf(stderr, "grun: --merge-trace: the files hold no calls\n")
		return exitUsage
	}
	if err := writeChromeTrace(*out, recs); err != nil {
		fmt.Fprintf(stderr, "grun: --merge-trace: %v\n", err)
		return exitInternal
	}
	fmt.Fprintf(stdout, "grun: %d calls of %d lanes written to %s\n", len(recs), len(lanesOf(recs)), *out)
	return 0
}

func readTrace(path string) ([]traced, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var recs []traced
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var r traced
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: not a GOCOLL_TRACE line: %w", path, n, err)
		}
		if r.StartNs == 0 || r.Kind == "" {
			return nil, fmt.Errorf("%s:%d: not a GOCOLL_TRACE line: no start_ns or kind", path, n)
		}
		r.Start = time.Unix(0, r.StartNs)
		if r.EndNs != 0 {
			r.End = time.Unix(0, r.EndNs)
		} else {
			r.Running = true
		}
		r.Call = fmt.Sprintf("%s #%d (algo %s, %d x %s", r.Kind, r.Seq, r.Algo, r.Count, r.Type)
		if r.Op != "" {
			r.Call += ", " + r.Op
		}
		if r.Root != nil {
			r.Call += ", root " + strconv.Itoa(*r.Root)
		}
		r.Call += ")"
		recs = append(recs, r)
	}
	return recs, sc.Err()
}

// lane is one row of the timeline: a rank's calls on one communicator.
type lane struct {
	rank int
	comm string
}

func (l lane) String() string {
	if l.comm == "" {
		return "rank " + strconv.Itoa(l.rank)
	}
	return "rank " + strconv.Itoa(l.rank) + ", " + l.comm
}

// lanesOf orders the lanes: by rank, the job's communicator first.
func lanesOf(recs []traced) []lane {
	seen := map[lane]bool{}
	var ls []lane
	for _, r := range recs {
		l := lane{r.JobRank, r.Comm}
		if !seen[l] {
			seen[l] = true
			ls = append(ls, l)
		}
	}
	sort.Slice(ls, func(i, j int) bool {
		if ls[i].rank != ls[j].rank {
			return ls[i].rank < ls[j].rank
		}
		return ls[i].comm < ls[j].comm
	})
	return ls
}

// origin is the earliest start: times are shown from it.
func origin(recs []traced) time.Time {
	t0 := recs[0].Start
	for _, r := range recs {
		if r.Start.Before(t0) {
			t0 = r.Start
		}
	}
	return t0
}

// end is a record's end, or its start if it never ended.
func (r traced) end() time.Time {
	if r.End.IsZero() {
		return r.Start
	}
	return r.End
}

// writeChromeTrace writes recs in the trace-event format: complete
// events ("X", microseconds) in one process, a thread per lane, named by
// metadata events.
func writeChromeTrace(path string, recs []traced) error {
	type event struct {
		Name string         `json:"name"`
		Cat  string         `json:"cat,omitempty"`
		Ph   string         `json:"ph"`
		Ts   float64        `json:"ts"`
		Dur  float64        `json:"dur,omitempty"`
		Pid  int            `json:"pid"`
		Tid  int            `json:"tid"`
		Args map[string]any `json:"args,omitempty"`
	}
	lanes := lanesOf(recs)
	tid := map[lane]int{}
	var evs []event
	for i, l := range lanes {
		tid[l] = i
		evs = append(evs, event{Name: "thread_name", Ph: "M", Tid: i, Args: map[string]any{"name": l.String()}},
			event{Name: "thread_sort_index", Ph: "M", Tid: i, Args: map[string]any{"sort_index": i}})
	}
	evs = append(evs, event{Name: "process_name", Ph: "M", Args: map[string]any{"name": "gocoll job"}})
	t0 := origin(recs)
	us := func(t time.Time) float64 { return float64(t.Sub(t0).Nanoseconds()) / 1e3 }
	for _, r := range recs {
		args := map[string]any{"seq": r.Seq, "bytes": r.Bytes}
		if r.Failed {
			args["failed"] = true
		}
		if r.Running {
			args["running"] = true
		}
		evs = append(evs, event{Name: r.Call, Cat: r.Kind, Ph: "X", Ts: us(r.Start), Dur: us(r.end()) - us(r.Start),
			Tid: tid[lane{r.JobRank, r.Comm}], Args: args})
	}
	b, err := json.Marshal(struct {
		TraceEvents     []event `json:"traceEvents"`
		DisplayTimeUnit string  `json:"displayTimeUnit"`
	}{evs, "ms"})
	if err != nil {
		return err
	}
	return privfile.WriteFile(path, b)
}

// Package stallreport builds the one-screen report of a job that stopped making
// progress: which ranks wait in the oldest unfinished call, for how long,
// and what each rank that is not in it was last seen doing. The ranks
// answer a request put in the rendezvous store with a Status each; grun,
// or the rank that noticed the stall, gathers them and builds the Report.
// It is internal: the format of the store keys and of Status is an
// agreement between comm and cmd/grun, not an API.
package stallreport

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gocoll/gocoll/internal/privfile"
)

// The store keys of the exchange: a request is put under RequestKey(k),
// k = 1, 2, ..., with the reason as its value; each rank answers under
// AnswerKey(k, rank) with its Status as JSON.
const requestPrefix = "stall/req/"

// RequestKey is where request k is put.
func RequestKey(k int) string { return requestPrefix + strconv.Itoa(k) }

// RequestPrefix is the prefix of every request key.
func RequestPrefix() string { return requestPrefix }

// AnswerPrefix is the prefix of the answers to request k.
func AnswerPrefix(k int) string { return "stall/ans/" + strconv.Itoa(k) + "/" }

// AnswerKey is where rank answers request k.
func AnswerKey(k, rank int) string { return AnswerPrefix(k) + strconv.Itoa(rank) }

// Status is one rank's answer: what each of its communicators is doing.
type Status struct {
	Rank  int          `json:"rank"`
	Host  string       `json:"host"`
	PID   int          `json:"pid"`
	Comms []CommStatus `json:"comms"`
	// Stacks is the rank's goroutine stacks, sent by a rank that is in
	// no call of the job's communicator (the user's code is what is
	// interesting there).
	Stacks string `json:"stacks,omitempty"`
}

// CommStatus is what one communicator of a rank is doing.
type CommStatus struct {
	// Name is "" for the job's communicator, else how it was split
	// (see comm.CallError.Comm); Rank is the rank in it.
	Name string `json:"name,omitempty"`
	Rank int    `json:"rank"`
	// Running says a call is under way: Call (as errors name it), number
	// CallNo, for Running for.
	Running bool          `json:"running"`
	Call    string        `json:"call,omitempty"`
	CallNo  uint64        `json:"call_no"`
	For     time.Duration `json:"for"`
	// Otherwise Call is the last call it began, finished Idle ago (to
	// the watchdog's tick).
	Idle time.Duration `json:"idle"`
}

// Decode reads an answer.
func Decode(b []byte) (Status, error) {
	var s Status
	err := json.Unmarshal(b, &s)
	return s, err
}

// Encode writes an answer.
func Encode(s Status) []byte {
	b, _ := json.Marshal(s) // a struct of strings and numbers
	return b
}

// Report is what the gathered answers say.
type Report struct {
	// Text is the screen: a few lines.
	Text string
	// Laggards are the job ranks not known to be in the oldest
	// unfinished call (behind it, or silent), in order; Call is that
	// call, as errors name it.
	Laggards []int
	Call     string
	// Waited is the longest any rank that answered has been in Call.
	Waited time.Duration
	// Stacks holds the goroutine stacks the laggards sent, for the file.
	Stacks string
}

// Build makes the report of a job of size ranks from the answers
// received (keyed by rank; ranks missing did not answer in time). why
// says who asked and why; notes, when not nil, adds what the launcher
// knows of a rank that did not answer ("pid 1234, stopped").
func Build(why string, size int, answers map[int]Status, notes func(rank int) string) Report {
	var r Report
	var b, stacks strings.Builder
	fmt.Fprintf(&b, "gocoll stall report: %s\n", why)
	in := func(s Status, name string) (CommStatus, bool) {
		for _, c := range s.Comms {
			if c.Name == name {
				return c, true
			}
		}
		return CommStatus{}, false
	}
	// The communicator whose call is reported: the job's, if any rank is
	// in one of its calls, else the sub-communicator in whose call a rank
	// has waited longest.
	name, found := "", false
	var longestSub time.Duration
	for _, s := range answers {
		for _, c := range s.Comms {
			switch {
			case !c.Running:
			case c.Name == "":
				name, found = "", true
			case !found && (c.For > longestSub || name == ""):
				name, longestSub = c.Name, c.For
			}
		}
		if found && name == "" {
			break
		}
	}
	// Its oldest unfinished call: the lowest call number any rank is in.
	var oldest uint64
	var call string
	for _, s := range answers {
		if c, ok := in(s, name); ok && c.Running && (oldest == 0 || c.CallNo < oldest) {
			oldest, call = c.CallNo, c.Call
		}
	}
	if oldest == 0 {
		fmt.Fprintf(&b, "no rank that answered is in a call (%d of %d answered)\n", len(answers), size)
		r.Text = b.String()
		return r
	}
	// Its members: every rank for the job's; for a sub-communicator,
	// the ranks that answered for it (and, it may be, some that did not
	// answer at all).
	members := make([]int, 0, size)
	for rank := range size {
		if _, ok := in(answers[rank], name); ok || name == "" {
			members = append(members, rank)
		}
	}
	of, who := "", func(rank int) string { return "rank " + strconv.Itoa(rank) }
	if name != "" {
		of = " of " + name
		who = func(rank int) string {
			c, _ := in(answers[rank], name)
			return fmt.Sprintf("rank %d (rank %d of it)", rank, c.Rank)
		}
	}
	r.Call = call + of
	var ranksIn []int
	var longest time.Duration
	calls := map[string][]int{}
	for _, rank := range members {
		if c, ok := in(answers[rank], name); ok && c.Running && c.CallNo == oldest {
			ranksIn = append(ranksIn, rank)
			longest = max(longest, c.For)
			calls[c.Call] = append(calls[c.Call], rank)
		}
	}
	sort.Ints(ranksIn)
	fmt.Fprintf(&b, "oldest unfinished call: %s%s\n", call, of)
	r.Waited = longest
	fmt.Fprintf(&b, "  in it: %s, waiting up to %s\n", Ranks(ranksIn), round(longest))
	if len(calls) > 1 {
		// Ranks in the same call number with other arguments.
		var parts []string
		for c, rs := range calls {
			sort.Ints(rs)
			parts = append(parts, fmt.Sprintf("%s called %s", Ranks(rs), c))
		}
		sort.Strings(parts)
		fmt.Fprintf(&b, "  MISMATCHED: %s\n", strings.Join(parts, "; "))
	}
	var silent []int
	for _, rank := range members {
		s, answered := answers[rank]
		c, _ := in(s, name)
		switch {
		case answered && c.Running && c.CallNo == oldest:
			continue
		case !answered:
			if name != "" {
				silent = append(silent, rank)
				continue
			}
			note := ""
			if notes != nil {
				note = notes(rank)
			}
			if note == "" {
				note = "stopped, frozen or gone?"
			}
			// Whether it entered the call is not known: a rank stopped
			// inside it answers no more than one stopped before it.
			fmt.Fprintf(&b, "  %s did not answer (%s)\n", who(rank), note)
		case c.Running:
			fmt.Fprintf(&b, "  %s is in %s, for %s\n", who(rank), c.Call, round(c.For))
		case c.CallNo == 0:
			fmt.Fprintf(&b, "  %s has made no call yet and has not entered #%d%s\n", who(rank), oldest, elsewhere(s, name))
		default:
			fmt.Fprintf(&b, "  %s finished %s %s ago and has not entered #%d%s\n", who(rank), c.Call, round(c.Idle), oldest, elsewhere(s, name))
		}
		r.Laggards = append(r.Laggards, rank)
		if where := mainAt(s.Stacks); where != "" {
			fmt.Fprintf(&b, "    its main goroutine %s\n", where)
		}
		if s.Stacks != "" {
			fmt.Fprintf(&stacks, "=== goroutine stacks of rank %d (pid %d on %s)\n%s\n", rank, s.PID, s.Host, s.Stacks)
		}
	}
	if len(answers) < size {
		for rank := range size {
			if _, ok := answers[rank]; !ok && name != "" {
				silent = append(silent, rank)
			}
		}
		if len(silent) > 0 {
			sort.Ints(silent)
			silent = slices.Compact(silent)
			fmt.Fprintf(&b, "  %s did not answer (members or not)\n", Ranks(silent))
		}
	}
	r.Text, r.Stacks = b.String(), stacks.String()
	return r
}

// elsewhere says what a rank not in the reported call is doing on its
// other communicators, if anything.
func elsewhere(s Status, reported string) string {
	var parts []string
	for _, c := range s.Comms {
		if c.Name != reported && c.Running {
			of := "the job's communicator"
			if c.Name != "" {
				of = c.Name
			}
			parts = append(parts, fmt.Sprintf("%s of %s for %s", c.Call, of, round(c.For)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; it is in " + strings.Join(parts, ", ")
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(time.Second)
	case d >= 100*time.Millisecond:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// Ranks writes a sorted list of ranks compactly: "ranks 0-6, 9", "rank 3".
func Ranks(rs []int) string {
	if len(rs) == 0 {
		return "no rank"
	}
	var parts []string
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(rs[i]))
		} else {
			parts = append(parts, strconv.Itoa(rs[i])+"-"+strconv.Itoa(rs[j]))
		}
		i = j + 1
	}
	if len(rs) == 1 {
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts, ", ")
}

// Wait bounds how long the maker of a report waits for answers: a
// stopped rank never answers, and a live one answers within milliseconds
// (its watchdog does, whatever its own code is doing).
const Wait = 500 * time.Millisecond

// Gather waits up to Wait for the answers of size ranks to request k,
// reading the store with scan.
func Gather(ctx context.Context, scan func(context.Context, string) (map[string][]byte, error), k, size int) map[int]Status {
	deadline := time.Now().Add(Wait)
	answers := map[int]Status{}
	for {
		m, err := scan(ctx, AnswerPrefix(k))
		if err != nil {
			return answers
		}
		for key, v := range m {
			r, err := strconv.Atoi(strings.TrimPrefix(key, AnswerPrefix(k)))
			if err != nil || r < 0 || r >= size {
				continue
			}
			if s, err := Decode(v); err == nil {
				answers[r] = s
			}
		}
		if len(answers) == size || time.Now().After(deadline) {
			return answers
		}
		select {
		case <-ctx.Done():
			return answers
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WriteFile writes the report and the laggards' stacks to name in the
// working directory, else in the private temporary directory (mode 0700),
// as a file of mode 0600 that no planted symlink can redirect (see
// internal/privfile), and returns where.
func (r Report) WriteFile(name string) string {
	text := r.Text
	if r.Stacks != "" {
		text += "\n" + r.Stacks
	}
	path, err := privfile.WriteNear(name, []byte(text))
	if err != nil {
		return "(nowhere: " + err.Error() + ")"
	}
	return path
}

// mainAt says where the main goroutine is in stacks (runtime/pprof's
// goroutine profile at debug level 2): its state and the innermost frame
// of the program's own code, skipping the standard library's, such as
// "[sleep] is in main.dawdle (main.go:58)". Empty if it cannot tell.
func mainAt(stacks string) string {
	_, g, ok := strings.Cut(stacks, "goroutine 1 [")
	if !ok {
		return ""
	}
	g, _, _ = strings.Cut(g, "\n\n")
	state, frames, _ := strings.Cut(g, "\n")
	state = strings.TrimSuffix(strings.SplitN(state, "]", 2)[0], ",")
	lines := strings.Split(frames, "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		fn := lines[i]
		if j := strings.LastIndexByte(fn, '('); j > 0 {
			fn = fn[:j]
		}
		// The package path ends at the first dot after the last slash;
		// the standard library's have no dot in their first element.
		pkg := fn
		slash := strings.LastIndexByte(pkg, '/')
		if dot := strings.IndexByte(pkg[slash+1:], '.'); dot >= 0 {
			pkg = pkg[:slash+1+dot]
		}
		first, _, _ := strings.Cut(pkg, "/")
		if pkg != "main" && !strings.Contains(first, ".") {
			continue
		}
		file := strings.TrimSpace(lines[i+1])
		if j := strings.LastIndexByte(file, ' '); j > 0 {
			file = file[:j]
		}
		return fmt.Sprintf("[%s] is in %s (%s)", state, fn, filepath.Base(file))
	}
	return ""
}

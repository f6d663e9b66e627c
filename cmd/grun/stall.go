//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gocoll/gocoll/internal/stallreport"
)

// watchStalls makes the job's stall reports (see package
// internal/stallreport) until stop is closed: when a rank asks, its call
// having waited GOCOLL_STALL, and when SIGQUIT reaches grun. The report
// goes to grun's stderr and, with the laggards' goroutine stacks, to a
// file.
//
// A stall gets one report. Each rank whose call waits GOCOLL_STALL asks
// for one, naming its own call, and the ranks waiting in one call share
// a request; but ranks that went on past the laggard's call (a broadcast
// whose part they finished, say) wait in a later call and ask apart, for
// a report about the same oldest unfinished call. A rank's request whose
// report would be about a call already reported, whose wait began before
// that report, is answered and not printed. SIGQUIT always prints.
func (j *job) watchStalls(quits <-chan os.Signal, stop <-chan struct{}) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	reported := map[string]time.Time{} // oldest unfinished call: when reported
	for k := 1; ; {
		select {
		case <-stop:
			return
		case <-quits:
			why := "SIGQUIT to grun"
			j.store.Set(stallreport.RequestKey(k), []byte(why))
			j.stallReport(k, why, true, reported, stop)
			k++
		case <-tick.C:
			if v, ok := j.store.Value(stallreport.RequestKey(k)); ok {
				j.stallReport(k, string(v), false, reported, stop)
				k++
			}
		}
	}
}

// stallReport gathers the answers to request k and prints the report,
// unless it is a rank's request (not SIGQUIT) for the stall of a call in
// reported, and records the call it is about there.
func (j *job) stallReport(k int, why string, quit bool, reported map[string]time.Time, stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	scan := func(context.Context, string) (map[string][]byte, error) {
		return j.store.Entries(stallreport.AnswerPrefix(k)), nil
	}
	start := time.Now()
	answers := stallreport.Gather(ctx, scan, k, len(j.originals))
	for end := start.Add(lateAnswers); len(answers) < len(j.originals) && time.Now().Before(end) && ctx.Err() == nil && j.awaited(answers); {
		answers = stallreport.Gather(ctx, scan, k, len(j.originals))
	}
	r := stallreport.Build(why, len(j.originals), answers, j.rankNote)
	if r.Call != "" {
		// The answers came after start: start less how long they say
		// a rank has waited is no later than when the wait began.
		if at, ok := reported[r.Call]; ok && !quit && start.Add(-r.Waited).Before(at) {
			return
		}
		reported[r.Call] = time.Now()
	}
	path := r.WriteFile(fmt.Sprintf("grun-stall-%d-%d.txt", os.Getpid(), k))
	for _, line := range strings.Split(strings.TrimSuffix(r.Text, "\n"), "\n") {
		j.out.say("%s", line)
	}
	j.out.say("stall report written, with the laggards' goroutine stacks, to %s", path)
}

// lateAnswers bounds how long a report waits for the answer of a rank
// of this host whose process runs, where stallreport.Wait is enough for
// a live rank on a machine with CPU to spare: on one so busy that the
// answer takes longer, the report would say that a rank waiting in the
// call had not entered it.
const lateAnswers = 2500 * time.Millisecond

// awaited says whether a rank that has not answered is a process of this
// host that runs, and may yet answer. As in rankNote, only pid and
// remote are read.
func (j *job) awaited(answers map[int]stallreport.Status) bool {
	for id, r := range j.originals {
		if _, ok := answers[id]; ok || r.proc == nil || r.remote {
			continue
		}
		switch procState(r.proc.pid()) {
		case 'R', 'S', 'D':
			return true
		}
	}
	return false
}

// rankNote says what grun knows of a rank that did not answer: whether
// its process is stopped, running or gone. Only pid and remote are read:
// they never change once the rank runs.
func (j *job) rankNote(id int) string {
	if id >= len(j.originals) {
		return "a replacement"
	}
	r := j.originals[id]
	if r.proc == nil {
		return "not started"
	}
	if r.remote {
		return "on " + r.host + ", " + r.pidNote()
	}
	pid := r.proc.pid()
	switch procState(pid) {
	case 0:
		return "pid " + strconv.Itoa(pid) + ", gone"
	case 'T':
		return "pid " + strconv.Itoa(pid) + ", stopped (SIGSTOP, or a debugger)"
	case 'Z':
		return "pid " + strconv.Itoa(pid) + ", exited"
	case 'D':
		return "pid " + strconv.Itoa(pid) + ", in uninterruptible sleep (I/O?)"
	case 'R':
		return "pid " + strconv.Itoa(pid) + ", running but not answering"
	}
	return "pid " + strconv.Itoa(pid) + ", not answering"
}

// procState is the state letter /proc gives process pid ('R', 'S', 'T'
// for stopped or traced, ...), or 0 if it cannot be read (no /proc, or
// the process is gone).
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The state follows the command, in parentheses that may hold
	// anything: read after the last one.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		c := s[i+2]
		if c == 't' {
			c = 'T' // traced: stopped by a debugger
		}
		return c
	}
	return 0
}

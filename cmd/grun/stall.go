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
func (j *job) watchStalls(quits <-chan os.Signal, stop <-chan struct{}) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for k := 1; ; {
		select {
		case <-stop:
			return
		case <-quits:
			why := "SIGQUIT to grun"
			j.store.Set(stallreport.RequestKey(k), []byte(why))
			j.stallReport(k, why, stop)
			k++
		case <-tick.C:
			if v, ok := j.store.Value(stallreport.RequestKey(k)); ok {
				j.stallReport(k, string(v), stop)
				k++
			}
		}
	}
}

// stallReport gathers the answers to request k and prints the report.
func (j *job) stallReport(k int, why string, stop <-chan struct{}) {
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
	answers := stallreport.Gather(ctx, scan, k, len(j.originals))
	r := stallreport.Build(why, len(j.originals), answers, j.rankNote)
	path := r.WriteFile(fmt.Sprintf("grun-stall-%d-%d.txt", os.Getpid(), k))
	for _, line := range strings.Split(strings.TrimSuffix(r.Text, "\n"), "\n") {
		j.out.say("%s", line)
	}
	j.out.say("stall report written, with the laggards' goroutine stacks, to %s", path)
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

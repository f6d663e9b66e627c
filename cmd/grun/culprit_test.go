//go:build unix

package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// scriptedProc is a rank whose end the test decides. It dies when the test
// kills it, or of the first signal grun sends while it lives; grun reaps it
// only when the test reaps it, so that the test sets the reap order.
type scriptedProc struct {
	id     int
	mu     sync.Mutex
	status *exitStatus
	reap   chan struct{}
	once   sync.Once
}

func (p *scriptedProc) pid() int { return 1000 + p.id }
func (p *scriptedProc) output() (io.ReadCloser, io.ReadCloser) {
	return io.NopCloser(strings.NewReader("")), io.NopCloser(strings.NewReader(""))
}

// die ends the process with s unless it has already ended.
func (p *scriptedProc) die(s exitStatus) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status != nil {
		return false
	}
	p.status = &s
	return true
}

func (p *scriptedProc) reapNow() { p.once.Do(func() { close(p.reap) }) }

func (p *scriptedProc) signal(sig syscall.Signal) error {
	if p.die(exitStatus{signaled: true, signal: sig}) {
		p.reapNow()
	}
	return nil
}

func (p *scriptedProc) running() bool { return false }

func (p *scriptedProc) wait() exitStatus {
	<-p.reap
	p.mu.Lock()
	defer p.mu.Unlock()
	return *p.status
}

type scriptedStarter struct {
	mu    sync.Mutex
	procs []*scriptedProc
}

func (s *scriptedStarter) start(spec rankSpec) (process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := &scriptedProc{id: spec.rank, reap: make(chan struct{})}
	s.procs = append(s.procs, p)
	return p, nil
}

// TestCulprit covers the race that reap order loses: a rank dies, its
// peers notice at once and exit themselves, and one of them is reaped
// before the rank that died. grun must still name the dead rank.
func TestCulprit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		exits []struct {
			rank   int
			status exitStatus
		}
		code int
		msg  string
	}{
		{
			name: "signal death reaped second",
			exits: []struct {
				rank   int
				status exitStatus
			}{{0, exitStatus{code: 1}}, {2, exitStatus{signaled: true, signal: syscall.SIGKILL}}},
			code: 137,
			msg:  "grun: rank 2 (pid 1002) killed by signal SIGKILL; at about the same time rank 0 exited with status 1; stopped the other 1 rank\n",
		},
		{
			name: "exit statuses keep reap order",
			exits: []struct {
				rank   int
				status exitStatus
			}{{1, exitStatus{code: 3}}, {0, exitStatus{code: 1}}},
			code: 3,
			msg:  "grun: rank 1 (pid 1001) exited with status 3; at about the same time rank 0 exited with status 1; stopped the other 1 rank\n",
		},
		{
			name: "one failure",
			exits: []struct {
				rank   int
				status exitStatus
			}{{2, exitStatus{code: 4}}},
			code: 4,
			msg:  "grun: rank 2 (pid 1002) exited with status 4; stopped the other 2 ranks\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := &scriptedStarter{}
			var stderr bytes.Buffer
			cfg := config{n: 3, prog: "scripted", grace: 5 * time.Second}
			j := newJob(cfg, st, io.Discard, &stderr, nil)
			go func() {
				for {
					st.mu.Lock()
					n := len(st.procs)
					st.mu.Unlock()
					if n == cfg.n {
						break
					}
					time.Sleep(time.Millisecond)
				}
				// All of them die first, then grun reaps them one by one
				// in the listed order: what the race produces.
				for _, e := range tc.exits {
					st.procs[e.rank].die(e.status)
				}
				for _, e := range tc.exits {
					st.procs[e.rank].reapNow()
					time.Sleep(20 * time.Millisecond)
				}
			}()
			code := j.run(context.Background(), nil)
			if code != tc.code {
				t.Errorf("exit status %d, want %d", code, tc.code)
			}
			if got := stderr.String(); got != tc.msg {
				t.Errorf("stderr:\n%q\nwant\n%q", got, tc.msg)
			}
		})
	}
}

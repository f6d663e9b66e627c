package comm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/gocoll/gocoll/comm"
	"github.com/gocoll/gocoll/transport/shm"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runAllReduce sums float32 inputs on every rank and checks the result.
func runAllReduce(t *testing.T, cs []*comm.Communicator, count int) {
	t.Helper()
	n := len(cs)
	bufs := make([][]float32, n)
	for r := range bufs {
		bufs[r] = make([]float32, count)
		for i := range bufs[r] {
			bufs[r][i] = float32((r*31 + i) % 1000)
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = comm.AllReduce(context.Background(), c, bufs[r], comm.Sum)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for i := 0; i < count; i++ {
		var want float32
		for q := 0; q < n; q++ {
			want += float32((q*31 + i) % 1000)
		}
		for r := range bufs {
			if bufs[r][i] != want {
				t.Fatalf("rank %d element %d: got %v, want %v", r, i, bufs[r][i], want)
			}
		}
	}
}

func newLocalLogged(t *testing.T, n int, opts ...comm.Option) ([]*comm.Communicator, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cs, err := comm.NewLocal(context.Background(), n, append(opts, comm.WithLogger(logger))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Concurrently: a TCP rank's Close lingers for its peers' goodbyes.
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Add(1)
			go func() { defer wg.Done(); c.Close() }()
		}
		wg.Wait()
	})
	return cs, logs
}

// TestTransportChoice: auto picks shared memory for ranks on one host,
// shm+tcp with the hierarchical allreduce for ranks on several (fake)
// hosts, and GOCOLL_ALGO still overrides the algorithm.
func TestTransportChoice(t *testing.T) {
	cases := []struct {
		name      string
		opts      []comm.Option
		transport string
		algo      string
	}{
		{"auto one host", nil, "transport=shm", "algo=rabenseifner"},
		{"forced shm", []comm.Option{comm.WithTransport("shm")}, "transport=shm", "algo=rabenseifner"},
		{"forced tcp", []comm.Option{comm.WithTransport("tcp")}, "transport=tcp", "algo=rabenseifner"},
		{"auto two hosts", []comm.Option{comm.WithFakeHosts(2)}, "transport=shm+tcp", "algo=hier"},
		{"two hosts, ring forced", []comm.Option{comm.WithFakeHosts(2), comm.WithAlgorithm("ring")}, "transport=shm+tcp", "algo=ring"},
		{"four hosts of one rank", []comm.Option{comm.WithFakeHosts(4)}, "transport=tcp", "algo=rabenseifner"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs, logs := newLocalLogged(t, 4, tc.opts...)
			runAllReduce(t, cs, 300_007)
			out := logs.String()
			for _, c := range cs {
				if got := "transport=" + c.Transport(); got != tc.transport {
					t.Errorf("rank %d: Transport() says %s, want %s", c.Rank(), got, tc.transport)
				}
			}
			if !strings.Contains(out, tc.transport+" ") {
				t.Errorf("log does not show %s:\n%s", tc.transport, out)
			}
			if !strings.Contains(out, tc.algo+" ") {
				t.Errorf("log does not show %s:\n%s", tc.algo, out)
			}
		})
	}
}

// TestMidSizeChoice: between 16 KiB and the ring's floor the choice
// follows the job's step-cost hint (the plan): over TCP Rabenseifner, on 3 ranks
// from 64 KiB and on 4 from 32 KiB, where shared memory keeps recursive
// doubling and the ring; each shows in the info log with its reason.
func TestMidSizeChoice(t *testing.T) {
	cases := []struct {
		transport string
		n, count  int // float32 elements
		algo, why string
	}{
		{"tcp", 4, 32 << 10, "algo=rabenseifner", "ring step would carry 32768 bytes < 262144"},
		{"tcp", 4, 8 << 10, "algo=rabenseifner", "a ring step would carry 8192 bytes < 262144"},
		{"tcp", 4, 4 << 10, "algo=rd", "16384 bytes <= 16384"},
		{"tcp", 3, 32 << 10, "algo=rabenseifner", "ring step would carry 43690 bytes"},
		{"tcp", 3, 8 << 10, "algo=rd", "32768 bytes <= 65536"},
		{"shm", 4, 32 << 10, "algo=ring", "few ranks"},
		{"shm", 4, 8 << 10, "algo=rd", "32768 bytes <= 65536"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s %d ranks %d floats", tc.transport, tc.n, tc.count), func(t *testing.T) {
			cs, logs := newLocalLogged(t, tc.n, comm.WithTransport(tc.transport))
			runAllReduce(t, cs, tc.count)
			out := logs.String()
			if !strings.Contains(out, tc.algo+" ") || !strings.Contains(out, tc.why) {
				t.Errorf("log does not show %s (%q):\n%s", tc.algo, tc.why, out)
			}
		})
	}
}

// TestSHMNeedsOneHost: forcing shm on a job spread over hosts fails at
// Init, naming the hosts.
func TestSHMNeedsOneHost(t *testing.T) {
	_, err := comm.NewLocal(context.Background(), 4, comm.WithTransport("shm"), comm.WithFakeHosts(2))
	if !errors.Is(err, comm.ErrInvalid) || !strings.Contains(err.Error(), "fake-host-1") {
		t.Fatalf("err = %v, want ErrInvalid naming the other host", err)
	}
}

// TestNonTemporalEnv: GOCOLL_SHM_NONTEMPORAL sets how the shared-memory
// transport writes long messages, an option given in code wins over it,
// and the info log says which a rank took; the sums are right every way
// (runAllReduce checks them, with messages past the 4 KiB floor).
func TestNonTemporalEnv(t *testing.T) {
	for _, tc := range []struct {
		env       string
		opt, want shm.NonTemporal
	}{
		{"", shm.NonTemporalAuto, shm.NonTemporalAuto},
		{"off", shm.NonTemporalAuto, shm.NonTemporalOff},
		{"on", shm.NonTemporalAuto, shm.NonTemporalOn},
		{"on", shm.NonTemporalOff, shm.NonTemporalOff},
	} {
		t.Run(tc.env+"/"+tc.opt.String(), func(t *testing.T) {
			t.Setenv("GOCOLL_SHM_NONTEMPORAL", tc.env)
			cs, logs := newLocalLogged(t, 3, comm.WithTransport("shm"), comm.WithSHMOptions(shm.Options{NonTemporal: tc.opt}))
			runAllReduce(t, cs, 100_003)
			// Where the transport has no non-temporal stores, the log
			// says off whatever was asked.
			if says := "shm_nontemporal=" + tc.want.Here().String(); !strings.Contains(logs.String(), says) {
				t.Errorf("log does not say %s:\n%s", says, logs.String())
			}
		})
	}
}

// TestSpinEnv: GOCOLL_SPIN sets every transport's busy-poll budget, 0
// turning it off, and the info log says what a rank chose; jobs run the
// same either way.
func TestSpinEnv(t *testing.T) {
	for _, tc := range []struct{ env, transport, says string }{
		{"0", "shm", "spin_shm=0s"},
		{"0", "tcp", "spin_tcp=0s"},
		{"50us", "tcp", "spin_tcp=50µs"},
		{"", "tcp", "spin_tcp=1ms"},
	} {
		t.Run(tc.transport+"/"+tc.env, func(t *testing.T) {
			t.Setenv("GOCOLL_SPIN", tc.env)
			cs, logs := newLocalLogged(t, 3, comm.WithTransport(tc.transport))
			runAllReduce(t, cs, 100_003)
			if !strings.Contains(logs.String(), tc.says) {
				t.Errorf("log does not say %s:\n%s", tc.says, logs.String())
			}
		})
	}
}

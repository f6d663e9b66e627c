package comm_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/comm"
	"github.com/gocoll/gocoll/transport/tcp"
)

// encryptJob runs n ranks in this process through a real store, with
// token (none: the job's secret from the store); opts gives each rank's
// options. Each rank runs an allreduce and checks it.
func encryptJob(t *testing.T, n int, token []byte, opts func(r int) []comm.Option) []error {
	t.Helper()
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := comm.Config{Rank: r, Size: n, LocalRank: r, LocalSize: n, Addr: srv.Addr(), Token: token, Source: "test"}
			c, err := comm.New(ctx, cfg, append(opts(r), comm.WithTimeout(20*time.Second))...)
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			x := make([]float64, 100000)
			for i := range x {
				x[i] = float64(r + i)
			}
			if err := comm.AllReduce(ctx, c, x, comm.Sum); err != nil {
				errs[r] = err
				return
			}
			for i, v := range x {
				if want := float64(n*i + n*(n-1)/2); v != want {
					errs[r] = errors.New("allreduce result wrong")
					t.Errorf("rank %d: x[%d] = %v, want %v", r, i, v, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

// testToken is the token of encryptJob's jobs that have one.
var testToken = []byte("0123456789abcdef0123456789abcdef")

// TestEncryptEnv: with GOCOLL_ENCRYPT=1 a job over TCP, and one over
// shared memory and TCP (two hosts feigned), computes as without; so
// does a job without a token, whose links encrypt under the keys of
// handshakes on the secret its store handed each rank.
func TestEncryptEnv(t *testing.T) {
	setLaunchEnv(t, map[string]string{"GOCOLL_ENCRYPT": "1"})
	for _, tc := range []struct {
		name  string
		n     int
		token []byte
		opts  []comm.Option
	}{
		{"tcp", 3, testToken, []comm.Option{comm.WithTransport("tcp")}},
		{"shm+tcp", 4, testToken, []comm.Option{comm.WithFakeHosts(2)}},
		{"tcp, no token", 3, nil, []comm.Option{comm.WithTransport("tcp")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for r, err := range encryptJob(t, tc.n, tc.token, func(int) []comm.Option { return tc.opts }) {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// TestEncryptDisagree: a rank that encrypts (by option here) and one that
// does not fail Init, each naming the setting, in one line: the job's
// plan, agreed before any link is made, finds it (rank 1, whose setting
// differs from rank 0's, with ErrEnv; rank 0 through rank 1's
// departure). Links made anyway would refuse each other
// (tcp.ErrEncryptMismatch, tested in transport/tcp).
func TestEncryptDisagree(t *testing.T) {
	setLaunchEnv(t, nil)
	errs := encryptJob(t, 2, testToken, func(r int) []comm.Option {
		return []comm.Option{comm.WithTransport("tcp"), comm.WithTCPOptions(tcp.Options{Encrypt: r == 1})}
	})
	for r, err := range errs {
		if !errors.Is(err, comm.ErrEnv) && !(r == 0 && errors.Is(err, comm.ErrPeerLost)) {
			t.Errorf("rank %d: %v, want ErrEnv (rank 0: or ErrPeerLost)", r, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "GOCOLL_ENCRYPT") || strings.Contains(msg, "\n") {
			t.Errorf("rank %d: %q: want one line naming GOCOLL_ENCRYPT", r, msg)
		}
	}
}

package comm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/gocoll/gocoll/bootstrap"
	envset "github.com/gocoll/gocoll/internal/settings"
)

// NewLocal builds a job of n ranks inside this process, one Communicator
// per rank, connected through a rendezvous store on the loopback interface
// and the same transports a multi-process job uses. It is meant for tests
// and examples: each returned Communicator must be driven by its own
// goroutine, exactly as if it were a separate process.
//
// Its ranks read GOCOLL_HALF_ACCUM, as Init's do; the rest of their
// configuration is NewLocal's.
//
// The store is owned by rank 0's Communicator and stops when it is closed;
// close every Communicator when done. On error nothing is left open.
func NewLocal(ctx context.Context, n int, opts ...Option) ([]*Communicator, error) {
	if ctx == nil {
		return nil, errNilContext("local job")
	}
	if n < 1 {
		return nil, fmt.Errorf("comm: local job of %d ranks, want at least 1: %w", n, ErrInvalid)
	}
	var secret [32]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return nil, fmt.Errorf("comm: local job: token: %w", err)
	}
	token := []byte(hex.EncodeToString(secret[:]))
	// As Init's ranks do (bootstrap.FromEnv), from the environment.
	halfAccum, err := envset.HalfAccum(os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("comm: local job: %w: %w", err, ErrEnv)
	}
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		return nil, fmt.Errorf("comm: local job: %w", err)
	}
	// One rank failing to join would leave the others waiting for it until
	// the timeout: give up on all of them at once instead.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs := make([]*Communicator, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := Config{Rank: r, Size: n, LocalRank: r, LocalSize: n, Addr: srv.Addr(), Token: token, Source: "local", HalfAccum: halfAccum}
			cs[r], errs[r] = New(ctx, cfg, opts...)
			if errs[r] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	if err := firstCause(errs); err != nil {
		// All at once: each Close waits a moment for its peers to close
		// too (the last calls compared, the links' goodbyes), which one
		// after another, with a thousand ranks, took minutes.
		for _, c := range cs {
			if c != nil {
				wg.Add(1)
				go func() { defer wg.Done(); c.Close() }()
			}
		}
		wg.Wait()
		srv.Close()
		return nil, err
	}
	cs[0].server = srv
	return cs, nil
}

// firstCause picks the error that made the others give up: one that is not
// just the cancellation NewLocal itself caused.
func firstCause(errs []error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if !errors.Is(err, context.Canceled) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

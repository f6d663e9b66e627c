package mesh

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

type fakePeer struct{ rank int }

// TestLinksUnreachable: a dial that fails makes the peer unreachable once,
// and every later Link returns that error without dialing again.
func TestLinksUnreachable(t *testing.T) {
	var dials, losses atomic.Int32
	gone := errors.New("refused")
	l := NewLinks(0, 3, LinkConfig[fakePeer]{
		Dial: func(ctx context.Context, r int) (*fakePeer, bool, error) {
			dials.Add(1)
			return nil, false, gone
		},
		Unreachable: func(r int, err error) { losses.Add(1) },
		Discard:     func(*fakePeer) {},
		Grace:       time.Nanosecond,
	})
	ctx := context.Background()
	for range 3 {
		if _, err := l.Link(ctx, 2); !errors.Is(err, gone) {
			t.Fatalf("Link = %v, want %v", err, gone)
		}
	}
	if dials.Load() != 1 || losses.Load() != 1 {
		t.Fatalf("%d dials and %d losses, want one each", dials.Load(), losses.Load())
	}
	l.Shut()
	l.Wait()
}

// TestLinksTransient: a dial that fails transiently is tried again by the
// call that waits, which then gets its link.
func TestLinksTransient(t *testing.T) {
	var dials atomic.Int32
	slow := errors.New("timed out")
	l := NewLinks(1, 2, LinkConfig[fakePeer]{
		Dial: func(ctx context.Context, r int) (*fakePeer, bool, error) {
			if dials.Add(1) < 3 {
				return nil, false, slow
			}
			return &fakePeer{r}, false, nil
		},
		Transient: func(err error) bool { return errors.Is(err, slow) },
		Discard:   func(*fakePeer) {},
	})
	p, err := l.Link(context.Background(), 0)
	if err != nil || p.rank != 0 || l.Linked() != 1 {
		t.Fatalf("Link = %v, %v with %d linked; want rank 0, linked", p, err, l.Linked())
	}
	l.Shut()
	l.Wait()
}

// TestLinksAdmitRules: an incoming connection is declined while the pair
// is linked or another admission runs, and, when both ends dial, kept
// only if it comes from the higher rank.
func TestLinksAdmitRules(t *testing.T) {
	release := make(chan struct{})
	var discarded atomic.Int32
	l := NewLinks(1, 3, LinkConfig[fakePeer]{
		Dial: func(ctx context.Context, r int) (*fakePeer, bool, error) {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, false, ctx.Err()
			}
			return nil, true, nil // declined: the peer's connection wins
		},
		Discard:     func(*fakePeer) { discarded.Add(1) },
		DeclineWait: time.Minute,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan *fakePeer, 2)
	for _, r := range []int{0, 2} {
		go func() { p, _ := l.Link(ctx, r); got <- p }()
	}
	// Both dials are under way (rank 2 after its grace).
	time.Sleep(2 * DialGrace)
	if l.Admit(0) {
		t.Error("rank 0, lower, admitted while rank 1 dials it")
	}
	if !l.Admit(2) {
		t.Fatal("rank 2, higher, declined while rank 1 dials it")
	}
	if l.Admit(2) {
		t.Error("a second admission of rank 2 admitted")
	}
	l.Admitted(2, &fakePeer{2})
	if p := <-got; p == nil || p.rank != 2 {
		t.Fatalf("Link(2) = %v, want the admitted link", p)
	}
	if l.Admit(2) {
		t.Error("rank 2 admitted again once linked")
	}
	close(release)
	l.Shut()
	if p := <-got; p != nil {
		t.Errorf("Link(0) after Shut = %v, want none", p)
	}
	l.Wait()
	if l.Linked() != 1 || discarded.Load() != 0 {
		t.Errorf("%d linked, %d discarded; want 1, 0", l.Linked(), discarded.Load())
	}
}

package probe

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/blame"
	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport/tcp"
)

// calls is what a group's Recent gives after it ran an allreduce of n
// float32 and then, if barrier, a barrier: real call headers, from a
// group of one rank.
func calls(t *testing.T, n int, barrier bool) []byte {
	t.Helper()
	ctx := context.Background()
	tr, err := tcp.Connect(ctx, nil, 0, 1, nil, tcp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	g := collectives.NewGroup(tr, collectives.Options{})
	if err := g.AllReduce(ctx, make([]byte, 4*n), reduce.Float32, reduce.Sum); err != nil {
		t.Fatal(err)
	}
	if barrier {
		if err := g.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return g.Recent()
}

// boards gives each of n ranks its Board on one real store, each on a
// connection of its own.
func boards(t *testing.T, n int, names func(r int) blame.Names) []Board {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	token := []byte("probe-test")
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	bs := make([]Board, n)
	for r := range bs {
		cl, err := bootstrap.Dial(ctx, srv.Addr(), token)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		bs[r] = Board{Store: cl, Prefix: "calls/0/", Names: names(r)}
	}
	return bs
}

func jobNames(size int) func(int) blame.Names {
	return func(r int) blame.Names { return blame.Names{Rank: r, Size: size} }
}

// TestProbe: ranks in the same call with different arguments find it
// through the store; a fault one rank published reaches the others with
// its sentinel; the ranks never seen in a call are named.
func TestProbe(t *testing.T) {
	ctx := context.Background()
	four, eight := calls(t, 4, false), calls(t, 8, false)

	bs := boards(t, 2, jobNames(2))
	if mm, _ := bs[0].Probe(ctx, four); mm != nil {
		t.Fatalf("alone in its call: %v", mm)
	}
	mm, at := bs[1].Probe(ctx, eight)
	if !errors.Is(mm, collectives.ErrMismatch) || !strings.Contains(mm.Error(), "rank 0 called allreduce #1") {
		t.Errorf("different counts: %v, want ErrMismatch naming rank 0's call", mm)
	}
	if at[0] != 1 || at[1] != 1 {
		t.Errorf("calls seen: %v, want call 1 of both", at)
	}

	bs = boards(t, 3, jobNames(3))
	bs[2].PublishFault(false, "rank 2 gave up a call before it started: context canceled")
	mm, _ = bs[0].Probe(ctx, four)
	var told Told
	if !errors.As(mm, &told) || !strings.Contains(mm.Error(), "rank 2 gave up") || errors.Is(mm, collectives.ErrMismatch) {
		t.Errorf("published loss: %v, want a Told naming rank 2, not a mismatch", mm)
	}
	// A rank that has made no call yet publishes nothing but still reads
	// why a peer went: rank 2 refused the first call.
	bs = boards(t, 3, jobNames(3))
	bs[2].PublishFault(true, "rank 2 refused its allreduce: send and recv overlap")
	mm, at = bs[1].Probe(ctx, nil)
	if !errors.Is(mm, collectives.ErrMismatch) || !strings.Contains(mm.Error(), "rank 2 refused its allreduce") {
		t.Errorf("refusal seen before any call: %v, want ErrMismatch saying rank 2 refused", mm)
	}
	if len(at) != 0 {
		t.Errorf("calls seen before any call: %v, want none (nothing published)", at)
	}
	_, at = bs[0].Probe(ctx, calls(t, 4, true))
	if got := bs[0].Absent(calls(t, 4, true), at); got != "; ranks 1, 2 never reached call #2" {
		t.Errorf("Absent = %q, want ranks 1 and 2 (rank 2 published a fault, not a call)", got)
	}
}

// TestCompareLast: at Close, a rank that closed after call 1 while the
// others went on to call 2 is told it closed early, and says so in the
// store for grun; ranks that closed at the same call agree.
func TestCompareLast(t *testing.T) {
	one, two := calls(t, 4, false), calls(t, 4, true)

	bs := boards(t, 2, jobNames(2))
	bs[1].PublishLast(one)
	if err := bs[0].CompareLast(one, 5*time.Second); err != nil {
		t.Errorf("the same last call: %v", err)
	}

	bs = boards(t, 3, jobNames(3))
	bs[1].PublishLast(two)
	bs[2].PublishLast(two)
	bs[0].PublishLast(one) // as Close does, before it compares
	err := bs[0].CompareLast(one, 5*time.Second)
	want := "this rank left the job after call #1 (it closed its communicator) while ranks 1 and 2 went on to barrier #2"
	if !errors.Is(err, collectives.ErrMismatch) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("closed early: %v, want %q... and ErrMismatch", err, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, serr := bs[1].Store.Scan(ctx, bootstrap.ClosedEarlyPrefix)
	if v := string(m[bootstrap.ClosedEarlyPrefix+"0"]); serr != nil || !strings.HasPrefix(v, "rank 0 left the job after call #1") {
		t.Errorf("for grun: %q, %v; want rank 0 left the job after call #1", v, serr)
	}
	if left := bs[1].ClosedBefore(); !strings.Contains(left.Error(), "rank 0 left the job after call #1") {
		t.Errorf("ClosedBefore = %v, want rank 0 after call #1", left)
	}
}

// TestCompareLastUnheard: a rank whose last call never reaches the store
// (alive, but slow to close) is waited for, not let pass: when the bound
// expires Close's comparison says it could not confirm that rank's last
// call (ErrUnconfirmed), never nil; once it publishes the same last call,
// the ranks agree, and once it publishes another, they do not.
func TestCompareLastUnheard(t *testing.T) {
	one := calls(t, 4, false)
	bs := boards(t, 3, jobNames(3))
	bs[1].PublishLast(one)
	const wait = 300 * time.Millisecond
	start := time.Now()
	err := bs[0].CompareLast(one, wait)
	want := "could not confirm rank 2's last call within 300ms"
	if !errors.Is(err, ErrUnconfirmed) || err.Error() != want+": "+ErrUnconfirmed.Error() {
		t.Errorf("rank 2 silent: %v, want %q and ErrUnconfirmed", err, want)
	}
	if took := time.Since(start); took < wait {
		t.Errorf("gave up after %v, before the bound %v", took, wait)
	}

	// Rank 2 closes late, after rank 0 began to wait: rank 0 waits for it.
	go func() {
		time.Sleep(200 * time.Millisecond)
		bs[2].PublishLast(one)
	}()
	if err := bs[0].CompareLast(one, 5*time.Second); err != nil {
		t.Errorf("rank 2 closed late with the same last call: %v", err)
	}

	bs = boards(t, 3, jobNames(3))
	other := calls(t, 5, false) // another count, the same call number
	bs[1].PublishLast(one)
	go func() {
		time.Sleep(200 * time.Millisecond)
		bs[2].PublishLast(other)
	}()
	if err := bs[0].CompareLast(one, 5*time.Second); !errors.Is(err, collectives.ErrMismatch) {
		t.Errorf("rank 2 closed late with another last call: %v, want ErrMismatch", err)
	}
}

// TestSchedule: the probe runs first after 40 ms, then less and less
// often, at most once a second.
func TestSchedule(t *testing.T) {
	var s Schedule
	var at []time.Duration
	for d := time.Duration(0); d < 5*time.Second; d += 10 * time.Millisecond {
		if s.Due(d) {
			at = append(at, d)
		}
	}
	if len(at) < 3 || at[0] != stallProbeAfter || at[1]-at[0] <= stallProbeAfter {
		t.Fatalf("probes at %v", at)
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i] - at[i-1]; gap > stallProbeMax+10*time.Millisecond {
			t.Errorf("probes %v apart, more than %v", gap, stallProbeMax)
		}
	}
}

// TestLingerForChecks: the rank holding the store waits for every other
// rank to say it compared its last calls, all of its bound for a
// rank alive but silent, and not for a rank the store saw die.
func TestLingerForChecks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, died := range []bool{false, true} {
		bs := boards(t, 3, jobNames(3))
		for r, b := range bs {
			if err := b.Store.(*bootstrap.Client).Join(ctx, r, 3, "linger"); err != nil {
				t.Fatal(err)
			}
		}
		bs[0].SaidChecked()
		bs[1].SaidChecked()
		if died {
			bs[2].Store.(*bootstrap.Client).Close()
		}
		start := time.Now()
		const wait = time.Second
		bs[0].LingerForChecks(wait)
		took := time.Since(start)
		if died && took >= wait {
			t.Errorf("rank 2 died: lingered %v, want less than %v", took, wait)
		}
		if !died && took < wait {
			t.Errorf("rank 2 alive and not done: lingered %v, want %v", took, wait)
		}
	}
}

package elastic

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/blame"
	"github.com/gocoll/gocoll/internal/plan"
	"github.com/gocoll/gocoll/internal/sentinel"
	"github.com/gocoll/gocoll/transport"
)

var token = []byte("elastic-test-token")

// job is a real rendezvous store and its configuration.
func job(t *testing.T) bootstrap.Config {
	t.Helper()
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return bootstrap.Config{Addr: srv.Addr(), Token: token, Source: "grun"}
}

// dial is a store connection of its own, joined as job rank rank of a
// job of size ranks if rank >= 0 (so that closing it without a Leave
// is a death the store records).
func dial(t *testing.T, cfg bootstrap.Config, rank, size int) *bootstrap.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := bootstrap.Dial(ctx, cfg.Addr, cfg.Token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	if rank >= 0 {
		if err := cl.Join(ctx, rank, size, ""); err != nil {
			t.Fatal(err)
		}
	}
	return cl
}

// member is job rank r's side of the job communicator's agreements
// (id 1), on a store connection of its own.
func member(t *testing.T, cfg bootstrap.Config, r, size int) Member {
	return Member{Store: dial(t, cfg, r, size), Names: blame.Names{Rank: r, Size: size}, ID: 1, Source: cfg.Source}
}

type outcome struct {
	survivors []int
	err       error
}

// shrink runs Survivors on each rank of ranks at once, each having lost
// lost[r], and returns what each got.
func shrink(ctx context.Context, ms []Member, ranks []int, lost map[int][]int) map[int]outcome {
	members := make([]int, len(ms))
	for i := range members {
		members[i] = i
	}
	var mu sync.Mutex
	got := map[int]outcome{}
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := ms[r].Survivors(ctx, members, lost[r])
			mu.Lock()
			got[r] = outcome{s, err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return got
}

// TestSurvivors: the ranks in Shrink agree on one set of survivors,
// leaving out a rank that died (the store saw its connection end), one
// that closed in good order, and one a survivor lost its link to.
func TestSurvivors(t *testing.T) {
	cases := []struct {
		name   string
		size   int
		die    []int         // ranks whose store connection ends without a goodbye
		closed []int         // ranks that closed the job's communicator
		lost   map[int][]int // links a rank lost
		want   []int
	}{
		{name: "all", size: 3, want: []int{0, 1, 2}},
		{name: "died", size: 4, die: []int{2}, want: []int{0, 1, 3}},
		{name: "closed", size: 3, closed: []int{0}, want: []int{1, 2}},
		{name: "lost link", size: 4, lost: map[int][]int{1: {3}}, want: []int{0, 1, 2}},
		{name: "died and lost", size: 5, die: []int{4}, lost: map[int][]int{0: {4}, 2: {1}}, want: []int{0, 2, 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cfg := job(t)
			ms := make([]Member, tc.size)
			for r := range ms {
				ms[r] = member(t, cfg, r, tc.size)
			}
			for _, r := range tc.die {
				ms[r].Store.(*bootstrap.Client).Close()
			}
			for _, r := range tc.closed {
				SayClosed(ms[r].Store, r)
			}
			var in []int
			for r := range tc.size {
				if !slices.Contains(tc.die, r) && !slices.Contains(tc.closed, r) {
					in = append(in, r)
				}
			}
			got := shrink(ctx, ms, in, tc.lost)
			for _, r := range in {
				o := got[r]
				if o.err != nil {
					t.Fatalf("rank %d: %v", r, o.err)
				}
				if !slices.Equal(o.survivors, tc.want) {
					t.Errorf("rank %d: survivors %v, want %v", r, o.survivors, tc.want)
				}
			}
		})
	}
}

// TestSurvivorsLate: a rank that comes to Shrink after the others agreed
// gets their decision, which leaves it out.
func TestSurvivorsLate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := job(t)
	ms := []Member{member(t, cfg, 0, 3), member(t, cfg, 1, 3), member(t, cfg, 2, 3)}
	// Rank 0 lost its link to rank 2: once 0 and 1 are in, 2 is
	// out, so they need not wait for it.
	got := shrink(ctx, ms, []int{0, 1}, map[int][]int{0: {2}})
	for r, o := range got {
		if o.err != nil || !slices.Equal(o.survivors, []int{0, 1}) {
			t.Fatalf("rank %d: %v, %v; want [0 1]", r, o.survivors, o.err)
		}
	}
	late, err := ms[2].Survivors(ctx, []int{0, 1, 2}, nil)
	if err != nil || !slices.Equal(late, []int{0, 1}) {
		t.Fatalf("late rank 2: %v, %v; want the others' [0 1]", late, err)
	}
}

// TestSurvivorsTimeout: a rank that lives but never comes to Shrink
// keeps the others waiting until their context ends; the error wraps
// sentinel.Timeout and names it in the communicator's numbering.
func TestSurvivorsTimeout(t *testing.T) {
	cfg := job(t)
	ms := []Member{member(t, cfg, 0, 3), member(t, cfg, 1, 3), member(t, cfg, 2, 3)}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	got := shrink(ctx, ms, []int{0, 1}, nil)
	for r, o := range got {
		if !errors.Is(o.err, sentinel.Timeout) || !errors.Is(o.err, context.DeadlineExceeded) {
			t.Fatalf("rank %d: %v, want sentinel.Timeout and the deadline", r, o.err)
		}
		if want := "rank 2 neither called Shrink nor left the job"; !strings.Contains(o.err.Error(), want) {
			t.Errorf("rank %d: %q does not say %q", r, o.err, want)
		}
	}
}

// TestStoreGone: a store that went away is a lost peer, and the error
// says where the store lived.
func TestStoreGone(t *testing.T) {
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	cfg := bootstrap.Config{Addr: srv.Addr(), Token: token}
	for _, tc := range []struct{ source, where string }{
		{"grun", "the launcher's"},
		{"torchrun", "rank 0's (it serves the store under torchrun"},
	} {
		m := member(t, cfg, -1, 2)
		m.Source = tc.source
		m.Store.(*bootstrap.Client).Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := m.Survivors(ctx, []int{0, 1}, nil)
		cancel()
		if !errors.Is(err, transport.ErrPeerLost) || !strings.Contains(err.Error(), tc.where) {
			t.Errorf("%s: %v, want ErrPeerLost naming %q", tc.source, err, tc.where)
		}
	}
	srv.Close()
}

// TestNames: the ids and names of shrunk and grown communicators follow
// from their parent's alone, so every rank computes the same; they
// differ from the parent's and from one another's.
func TestNames(t *testing.T) {
	id1, n1 := Shrunk(7, "", 0)
	id2, n2 := Shrunk(id1, n1, 1)
	idg, ng := Grown(id2, n2, 1)
	idg2, ng2 := Grown(id2, n2, 2)
	ids, ns := Shrunk(9, "split #1 color 0", 0)
	ids2, ns2 := Shrunk(ids, ns, 1)
	for _, tc := range []struct{ got, want string }{
		{n1, "shrink #1"}, {n2, "shrink #2"}, {ng, "shrink #2 > grow #1"}, {ng2, "shrink #2 > grow #2"},
		{ns, "split #1 color 0 > shrink #1"}, {ns2, "split #1 color 0 > shrink #2"},
	} {
		if tc.got != tc.want {
			t.Errorf("name %q, want %q", tc.got, tc.want)
		}
	}
	seen := map[uint64]bool{7: true, 9: true}
	for _, id := range []uint64{id1, id2, idg, idg2, ids, ids2} {
		if seen[id] || id&1 == 0 {
			t.Errorf("id %x repeats an earlier one or is even (0 is the job's)", id)
		}
		seen[id] = true
	}
	if again, _ := Shrunk(7, "", 0); again != id1 {
		t.Errorf("Shrunk(7) gave %x, then %x", id1, again)
	}
}

// joined is what a replacement got: its job rank and admission.
type joined struct {
	k   int
	a   Admission
	err error
}

// replacement runs a replacement's side of joining, as comm's Init
// does, and sends its admission (or error) on done.
func replacement(ctx context.Context, t *testing.T, cfg bootstrap.Config, size int, done chan<- joined) {
	store := dial(t, cfg, -1, 0)
	go func() {
		start := time.Now()
		spare, err := Spare(ctx, store)
		if err != nil {
			done <- joined{err: err}
			return
		}
		k, err := TakeRank(ctx, store, size, spare)
		if err == nil {
			err = store.Join(ctx, k, size, "")
		}
		if err == nil {
			err = SayWaiting(ctx, store, k, start)
		}
		if err != nil {
			done <- joined{err: err}
			return
		}
		a, err := Admitted(ctx, store, k, size)
		done <- joined{k, a, err}
	}()
}

// TestGrow: replacements find the running job, take fresh job ranks and
// wait; the members' Pending counts them; one Grow admits them all, in
// job rank order, and each joiner reads the same admission.
func TestGrow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := job(t)
	const size = 2
	ms := []Member{member(t, cfg, 0, size), member(t, cfg, 1, size)}
	if s, err := Running(ctx, cfg); s != nil || err != nil {
		t.Fatalf("Running before any rank said so: %v, %v; want nil, nil", s, err)
	}
	p := plan.Plan{Transport: "tcp", MaxMessage: 1 << 18}
	for r, m := range ms {
		if err := SayRunning(ctx, m.Store, r, "shm", 1<<18, 4, false, p); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Running(ctx, cfg)
	if err != nil || s == nil {
		t.Fatalf("Running once the job runs: %v, %v", s, err)
	}
	s.Close()
	var log bytes.Buffer
	got, err := JobPlan(ctx, ms[0].Store, plan.Plan{Transport: "auto"}, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil || got != p {
		t.Fatalf("JobPlan: %+v, %v; want %+v", got, err, p)
	}
	if !strings.Contains(log.String(), "taking the job's plan") || !strings.Contains(log.String(), "setting=GOCOLL_TRANSPORT") {
		t.Errorf("a differing setting of its own is not logged: %q", log.String())
	}

	pctx, stop := context.WithCancel(ctx)
	defer stop()
	var pending Pending
	go pending.Watch(pctx, cfg)

	done := make(chan joined, 2)
	replacement(ctx, t, cfg, size, done)
	replacement(ctx, t, cfg, size, done)
	for pending.Count() != 2 {
		select {
		case <-ctx.Done():
			t.Fatalf("Pending counts %d, want 2", pending.Count())
		case <-time.After(10 * time.Millisecond):
		}
	}
	var joiners [size][]int
	var left [size]int
	var wg sync.WaitGroup
	for r, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if joiners[r], left[r], err = m.Joiners(ctx, 1); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if !slices.Equal(joiners[0], []int{2, 3}) || !slices.Equal(joiners[1], joiners[0]) || left != [size]int{} {
		t.Fatalf("joiners %v, left %v; want [2 3] on both, none left", joiners, left)
	}
	id, name := Grown(1, "", 1)
	a := Admission{ID: id, Members: []int{0, 1, 2, 3}, Name: name}
	if err := ms[1].Admit(ctx, joiners[1], a); err != nil {
		t.Fatal(err)
	}
	pending.AfterGrow(left[1])
	ks := map[int]bool{}
	for range 2 {
		j := <-done
		if j.err != nil {
			t.Fatal(j.err)
		}
		ks[j.k] = true
		if j.a.ID != a.ID || !slices.Equal(j.a.Members, a.Members) || j.a.Name != "grow #1" {
			t.Errorf("joiner %d: admission %+v, want %+v", j.k, j.a, a)
		}
	}
	if !ks[2] || !ks[3] {
		t.Errorf("the joiners took job ranks %v, want 2 and 3", ks)
	}
	if n := pending.Count(); n != 0 {
		t.Errorf("Pending counts %d after the Grow, want 0", n)
	}
	// A second Grow with nobody waiting admits nobody.
	if j, l, err := ms[0].Joiners(ctx, 2); len(j) != 0 || l != 0 || err != nil {
		t.Errorf("second Grow: %v, %d, %v; want nobody", j, l, err)
	}
}

// TestPendingAfterGrow: a count the watcher read before a Grow set it is
// dropped.
func TestPendingAfterGrow(t *testing.T) {
	var p Pending
	gen := p.generation()
	p.seen(gen, 3)
	if p.Count() != 3 {
		t.Fatalf("Count %d, want 3", p.Count())
	}
	gen = p.generation()
	p.AfterGrow(1)
	p.seen(gen, 3) // read before the Grow: stale
	if p.Count() != 1 {
		t.Fatalf("Count %d after a stale read, want the Grow's 1", p.Count())
	}
	p.seen(p.generation(), 0)
	if p.Count() != 0 {
		t.Fatalf("Count %d, want 0", p.Count())
	}
}

// TestJoinRefused: a job whose transport cannot link to new processes,
// or that admitted every replacement it can, refuses a joiner with
// sentinel.Unsupported; one whose members all closed or left turns a
// waiting joiner away with sentinel.Excluded.
func TestJoinRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	cfg := job(t)
	m := member(t, cfg, 0, 2)
	if err := SayRunning(ctx, m.Store, 0, "tcp", 1<<18, 0, true, plan.Plan{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Spare(ctx, m.Store); !errors.Is(err, sentinel.Unsupported) || !strings.Contains(err.Error(), "rank 0 runs over tcp with GOCOLL_TCP_CONNECT=eager") {
		t.Errorf("Spare of an eager tcp job: %v, want sentinel.Unsupported naming rank 0's transport", err)
	}
	if _, err := TakeRank(ctx, m.Store, 2, 1); err != nil {
		t.Fatal(err)
	}
	if k, err := TakeRank(ctx, m.Store, 2, 1); !errors.Is(err, sentinel.Unsupported) {
		t.Errorf("TakeRank past the spare: %d, %v; want sentinel.Unsupported", k, err)
	}
	if _, err := JobPlan(ctx, dial(t, job(t), -1, 0), plan.Plan{}, slog.Default()); !errors.Is(err, sentinel.Unsupported) {
		t.Errorf("JobPlan of a job that published none: %v, want sentinel.Unsupported", err)
	}

	cfg = job(t)
	ms := []Member{member(t, cfg, 0, 2), member(t, cfg, 1, 2)}
	if err := SayRunning(ctx, ms[0].Store, 0, "tcp", 1<<18, 4, false, plan.Plan{}); err != nil {
		t.Fatal(err)
	}
	SayClosed(ms[0].Store, 0)
	ms[1].Store.(*bootstrap.Client).Close() // dies
	store := dial(t, cfg, 2, 2)
	if err := SayWaiting(ctx, store, 2, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := Admitted(ctx, store, 2, 2); !errors.Is(err, sentinel.Excluded) {
		t.Errorf("Admitted once every member left: %v, want sentinel.Excluded", err)
	}
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	cfg = job(t)
	store = dial(t, cfg, -1, 0)
	if _, err := Admitted(short, store, 2, 2); !errors.Is(err, sentinel.Timeout) {
		t.Errorf("Admitted past its deadline: %v, want sentinel.Timeout", err)
	}
}

// TestAdmission: admissions read back as written; a damaged one is
// refused with ErrInvalid, as is a bad rank list.
func TestAdmission(t *testing.T) {
	a := Admission{ID: 0xfeed1, Members: []int{0, 2, 5}, Name: "shrink #1 > grow #3"}
	got, err := parseAdmission(a.encode())
	if err != nil || got.ID != a.ID || !slices.Equal(got.Members, a.Members) || got.Name != a.Name {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, a)
	}
	for _, bad := range []string{"admit", "admit zz 0,1 x", "admit 1 0,-1 x", "admit 1 0,1", "wait 12"} {
		if _, err := parseAdmission(bad); !errors.Is(err, collectives.ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
	if rs, err := parseRanks(RankList([]int{3, 0, 7})); err != nil || !slices.Equal(rs, []int{3, 0, 7}) {
		t.Errorf("rank list round trip: %v, %v", rs, err)
	}
}

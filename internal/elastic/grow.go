package elastic

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/sentinel"
)

// canGrow says which transports link to processes started later.
const canGrow = "replacements link to the members over TCP made on demand, which GOCOLL_TCP_CONNECT=eager turns off"

// CannotGrow is the error of a Grow on a transport that cannot link to
// new processes.
func CannotGrow(transportName string) error {
	return fmt.Errorf("the %s transport cannot link to new processes (%s): %w", transportName, canGrow, sentinel.Unsupported)
}

// Joiners returns the job ranks the members agree to admit in their
// seq-th Grow of the communicator (the first proposal stored wins), and
// how many of those this rank found waiting it leaves waiting. A rank
// proposes the replacements it finds waiting that have not left the
// store; one that left is marked gone, which Pending stops counting.
func (m Member) Joiners(ctx context.Context, seq int64) (joiners []int, left int, err error) {
	key := m.base() + "grow/" + strconv.FormatInt(seq, 10)
	store := m.Store
	all, err := store.Scan(ctx, pendingPrefix)
	if err != nil {
		return nil, 0, m.storeGone(err)
	}
	ds, err := store.Departures(ctx, 0)
	if err != nil {
		return nil, 0, m.storeGone(err)
	}
	out := map[int]bool{}
	for _, d := range ds {
		out[d.Rank] = true
	}
	var waiting []int
	for k, v := range all {
		j, err := strconv.Atoi(strings.TrimPrefix(k, pendingPrefix))
		if err != nil || !strings.HasPrefix(string(v), "wait ") {
			continue
		}
		if out[j] {
			store.Put(ctx, k, []byte("gone"))
			continue
		}
		waiting = append(waiting, j)
	}
	slices.Sort(waiting)
	v, err := store.Create(ctx, key, []byte(RankList(waiting)))
	if err != nil {
		return nil, 0, m.storeGone(err)
	}
	if joiners, err = parseRanks(string(v)); err != nil {
		return nil, 0, err
	}
	for _, j := range waiting {
		if !slices.Contains(joiners, j) {
			left++
		}
	}
	return joiners, left, nil
}

// Admission is what a Grow tells each joiner it admitted: the new
// communicator's id, its members' job ranks in order, and its name.
type Admission struct {
	ID      uint64
	Members []int
	Name    string
}

func (a Admission) encode() string {
	return "admit " + strconv.FormatUint(a.ID, 16) + " " + RankList(a.Members) + " " + a.Name
}

func parseAdmission(v string) (Admission, error) {
	f := strings.SplitN(v, " ", 4)
	if len(f) < 4 || f[0] != "admit" {
		return Admission{}, fmt.Errorf("bad admission %q in the store: %w", v, collectives.ErrInvalid)
	}
	id, perr := strconv.ParseUint(f[1], 16, 64)
	all, rerr := parseRanks(f[2])
	if perr != nil || rerr != nil {
		return Admission{}, fmt.Errorf("bad admission %q in the store: %w", v, collectives.ErrInvalid)
	}
	return Admission{ID: id, Members: all, Name: f[3]}, nil
}

// Admit tells each of joiners it is admitted to a. Every member says it:
// a joiner goes on as soon as one has, and any member may die meanwhile.
func (m Member) Admit(ctx context.Context, joiners []int, a Admission) error {
	v := []byte(a.encode())
	for _, j := range joiners {
		if err := m.Store.Put(ctx, pendingPrefix+strconv.Itoa(j), v); err != nil {
			return m.storeGone(err)
		}
	}
	return nil
}

// Grown is the id and name of the communicator the seq-th Grow of the
// communicator id, named name, makes.
func Grown(id uint64, name string, seq int64) (uint64, string) {
	h := fnv.New64a()
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], id)
	binary.LittleEndian.PutUint64(b[8:], uint64(seq))
	binary.LittleEndian.PutUint64(b[16:], 0x574f5247) // "GROW"
	h.Write(b[:])
	grown := "grow #" + strconv.Itoa(int(seq))
	if name != "" {
		grown = name + " > " + grown
	}
	return h.Sum64() | 1, grown
}

// pendingEvery is how often Watch looks at the store for replacements
// waiting to join; joinPoll how often a waiting replacement looks for
// its admission.
const (
	pendingEvery = 100 * time.Millisecond
	joinPoll     = 10 * time.Millisecond
)

// Pending is one rank's count of the replacements waiting to join the
// job: Watch refreshes it from the store, a Grow sets it (AfterGrow).
// The zero value counts none.
type Pending struct {
	n atomic.Int64
	// gen counts the Grows that set n, under mu: a count Watch read
	// before an admission may include the joiners admitted, and is
	// dropped.
	mu  sync.Mutex
	gen uint64
}

// Count is the replacements last seen waiting: an atomic load.
func (p *Pending) Count() int { return int(p.n.Load()) }

// seen sets the count to n replacements Watch found waiting, unless a
// Grow set it since Watch took gen (generation) before reading the
// store.
func (p *Pending) seen(gen uint64, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen == p.gen {
		p.n.Store(int64(n))
	}
}

// AfterGrow sets the count to the n replacements still waiting after a
// Grow, and drops what Watch is reading meanwhile: the watcher may have
// read the joiners admitted waiting a moment ago and would say so until
// its next read, and ranks that grow again on a positive count would
// admit nobody while the next replacement has not arrived yet.
func (p *Pending) AfterGrow(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen++
	p.n.Store(int64(n))
}

func (p *Pending) generation() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}

// Watch keeps p fresh, every 100 ms, on a store connection of its own
// (to cfg's store), until ctx ends or the store fails.
func (p *Pending) Watch(ctx context.Context, cfg bootstrap.Config) {
	cl, err := bootstrap.DialJob(ctx, cfg)
	if err != nil {
		return
	}
	defer cl.Close()
	tick := time.NewTicker(pendingEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		gen := p.generation()
		m, err := cl.Scan(ctx, pendingPrefix)
		if err != nil {
			return
		}
		n := 0
		for _, v := range m {
			if strings.HasPrefix(string(v), "wait ") {
				n++
			}
		}
		p.seen(gen, n)
	}
}

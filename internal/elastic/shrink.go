package elastic

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/gocoll/gocoll/internal/sentinel"
)

// shrinkPoll is how often a rank in Shrink looks at the store for the
// others' arrivals and departures.
const shrinkPoll = 5 * time.Millisecond

// Survivors returns the job ranks among members that the ranks in
// Shrink agreed survive, in members' order; lost is the members this
// rank lost its links to. Each rank publishes which members it lost;
// once every member has either done so or is known gone (departed from
// the store, closed, or lost by one that published), a rank proposes the
// members that published and that nobody lost, and the store keeps the
// first proposal: the one every rank then acts on. When ctx ends first,
// the error wraps sentinel.Timeout and names the members still waited
// for.
func (m Member) Survivors(ctx context.Context, members, lost []int) ([]int, error) {
	base := m.base()
	me := m.me()
	store := m.Store
	// The ranks still waited for when ctx ends: all but this one, until
	// the store says otherwise.
	var waiting []int
	for _, j := range members {
		if j != me {
			waiting = append(waiting, j)
		}
	}
	fail := func(err error) error {
		if ctx.Err() == nil {
			return m.storeGone(err)
		}
		names := make([]string, len(waiting))
		for i, j := range waiting {
			names[i] = m.Names.JobWho(j)
		}
		return fmt.Errorf("%w: %s neither called Shrink nor left the job: %w",
			sentinel.Timeout, strings.Join(names, ", "), context.Cause(ctx))
	}
	if err := store.Put(ctx, base+"in/"+strconv.Itoa(me), []byte(RankList(lost))); err != nil {
		return nil, fail(err)
	}
	for {
		in, err := store.Scan(ctx, base)
		if err != nil {
			return nil, fail(err)
		}
		if v, ok := in[base+"decided"]; ok {
			return parseRanks(string(v))
		}
		out, err := gone(ctx, store)
		if err != nil {
			return nil, fail(err)
		}
		arrived := map[int]bool{}
		for _, j := range members {
			v, ok := in[base+"in/"+strconv.Itoa(j)]
			if !ok {
				continue
			}
			arrived[j] = true
			ls, err := parseRanks(string(v))
			if err != nil {
				return nil, fmt.Errorf("rank %d's entry in the store: %w", j, err)
			}
			for _, l := range ls {
				out[l] = true
			}
		}
		var missing, alive []int
		for _, j := range members {
			switch {
			case out[j]:
			case arrived[j]:
				alive = append(alive, j)
			default:
				missing = append(missing, j)
			}
		}
		if len(missing) == 0 {
			v, err := store.Create(ctx, base+"decided", []byte(RankList(alive)))
			if err != nil {
				return nil, fail(err)
			}
			return parseRanks(string(v))
		}
		waiting = missing
		select {
		case <-ctx.Done():
			return nil, fail(ctx.Err())
		case <-time.After(shrinkPoll):
		}
	}
}

// Shrunk is the id and name of the communicator that a Shrink of the
// communicator id, named name, makes, gen the shrinks that led to id:
// every survivor computes them alike on its own, and a communicator is
// shrunk once.
func Shrunk(id uint64, name string, gen int) (uint64, string) {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[0:], id)
	binary.LittleEndian.PutUint64(b[8:], 0x4b4e49524853) // "SHRINK"
	h.Write(b[:])
	name = strings.TrimSuffix(name, fmt.Sprintf("shrink #%d", gen))
	name = strings.TrimSuffix(name, " > ")
	if name != "" {
		name += " > "
	}
	return h.Sum64() | 1, name + fmt.Sprintf("shrink #%d", gen+1)
}

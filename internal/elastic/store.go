package elastic

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/blame"
	"github.com/gocoll/gocoll/internal/probe"
	"github.com/gocoll/gocoll/transport"
)

// Store is the part of the rendezvous client (bootstrap.Client) the
// agreements use: a probe.Store's Put, Scan and Departures, and Create.
type Store interface {
	probe.Store
	Create(ctx context.Context, key string, value []byte) ([]byte, error)
}

const (
	pendingPrefix   = "elastic/pending/"
	transportPrefix = "elastic/transport/"
	joinRankPrefix  = "elastic/joinrank/"
	closedPrefix    = "elastic/closed/"
	planKey         = "elastic/plan"
)

// Member is one rank's side of a communicator's agreements.
type Member struct {
	Store Store
	// Names numbers the communicator's ranks (for errors, and this
	// rank's job rank).
	Names blame.Names
	// ID is the communicator's id: its agreements' keys.
	ID uint64
	// Source is the launcher (bootstrap.Config.Source): where the
	// store lives, which an error of a store gone names.
	Source string
}

func (m Member) base() string { return "elastic/" + strconv.FormatUint(m.ID, 16) + "/" }

// me is this rank's job rank.
func (m Member) me() int { return m.Names.JobRank(m.Names.Rank) }

// storeGone explains a failed request to the store during an agreement.
func (m Member) storeGone(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return err
	}
	where := "the launcher's"
	if m.Source != "grun" && m.Source != "local" {
		where = "rank 0's (it serves the store under " + m.Source + "; recovery from rank 0's loss needs grun's store)"
	}
	return fmt.Errorf("%w: the rendezvous store, %s, is unreachable, so no survivor can know what the others agreed: %w", transport.ErrPeerLost, where, err)
}

// gone is the job ranks the store saw leave abnormally (its departures)
// or that closed the job's communicator (SayClosed).
func gone(ctx context.Context, store Store) (map[int]bool, error) {
	ds, err := store.Departures(ctx, 0)
	if err != nil {
		return nil, err
	}
	g := map[int]bool{}
	for _, d := range ds {
		g[d.Rank] = true
	}
	closed, err := store.Scan(ctx, closedPrefix)
	if err != nil {
		return nil, err
	}
	for k := range closed {
		if j, err := strconv.Atoi(strings.TrimPrefix(k, closedPrefix)); err == nil {
			g[j] = true
		}
	}
	return g, nil
}

// SayClosed tells the store job rank jobRank closes the job's
// communicator: it left in good order, which the store's departures do
// not list, and the others must not wait for it in Shrink.
func SayClosed(store Store, jobRank int) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	store.Put(ctx, closedPrefix+strconv.Itoa(jobRank), nil)
}

// RankList is ranks as the store holds them, and as errors list them:
// "0,2,3".
func RankList(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ",")
}

func parseRanks(v string) ([]int, error) {
	if v == "" {
		return nil, nil
	}
	var rs []int
	for _, f := range strings.Split(v, ",") {
		r, err := strconv.Atoi(f)
		if err != nil || r < 0 {
			return nil, fmt.Errorf("bad rank list %q in the store: %w", v, collectives.ErrInvalid)
		}
		rs = append(rs, r)
	}
	return rs, nil
}

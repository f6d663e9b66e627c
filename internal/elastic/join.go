package elastic

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/plan"
	"github.com/gocoll/gocoll/internal/sentinel"
)

// SayRunning tells the store, once rank's communicator of an elastic job
// is built, that the job runs, over which transport (tname) the rank
// runs, and whether it can link to replacements: spare is how many its
// TCP side can link to (0: none), maxMessage the job's agreed message
// size, eager that its TCP links are all made at Init. Every rank puts
// the same plan, before the job is said to run: a replacement finds it
// whichever rank said so first.
func SayRunning(ctx context.Context, store Store, rank int, tname string, maxMessage, spare int, eager bool, p plan.Plan) error {
	what := tname
	if spare > 0 {
		what = fmt.Sprintf("%s %d %d", tname, maxMessage, spare)
	} else if eager {
		what = tname + " with GOCOLL_TCP_CONNECT=eager"
	}
	if err := store.Put(ctx, transportPrefix+strconv.Itoa(rank), []byte(what)); err != nil {
		return err
	}
	if err := store.Put(ctx, planKey, []byte(p.Encode())); err != nil {
		return err
	}
	return store.Put(ctx, bootstrap.ElasticRunningKey, []byte("1"))
}

// Running says whether cfg's job is an elastic job running already,
// which a process starting now joins as a replacement. It returns the
// store connection it asked on, to be used for the joining, or nil.
func Running(ctx context.Context, cfg bootstrap.Config) (*bootstrap.Client, error) {
	store, err := bootstrap.DialJob(ctx, cfg)
	if err != nil {
		return nil, err
	}
	m, err := store.Scan(ctx, bootstrap.ElasticRunningKey)
	if err != nil {
		store.Close()
		return nil, err
	}
	if _, ok := m[bootstrap.ElasticRunningKey]; !ok {
		store.Close()
		return nil, nil
	}
	return store, nil
}

// Spare is how many replacements the running job's transports can link
// to, from what each rank said (SayRunning); an error wrapping
// sentinel.Unsupported if some rank's cannot.
func Spare(ctx context.Context, store Store) (int, error) {
	ts, err := store.Scan(ctx, transportPrefix)
	if err != nil {
		return 0, err
	}
	spare := 0
	for k, v := range ts {
		var name string
		var mm, sp int
		if n, _ := fmt.Sscanf(string(v), "%s %d %d", &name, &mm, &sp); n != 3 || sp <= 0 || mm <= 0 {
			return 0, fmt.Errorf("%s runs over %s, which cannot link to new processes (%s): %w",
				strings.Replace(k, transportPrefix, "rank ", 1), v, canGrow, sentinel.Unsupported)
		}
		spare = sp
	}
	if spare == 0 {
		return 0, fmt.Errorf("no rank said which transport it runs: %w", sentinel.Unsupported)
	}
	return spare, nil
}

// JobPlan is the plan of the running elastic job that a replacement
// joins, from the store: the job's, whatever this process's own settings
// say (mine), so that it chooses as the members do. A setting of its own
// that differs is logged, at info.
func JobPlan(ctx context.Context, store Store, mine plan.Plan, log *slog.Logger) (plan.Plan, error) {
	m, err := store.Scan(ctx, planKey)
	if err != nil {
		return plan.Plan{}, err
	}
	v, ok := m[planKey]
	if !ok {
		return plan.Plan{}, fmt.Errorf("the running job published no plan (a job of another gocoll version?): %w", sentinel.Unsupported)
	}
	p, err := plan.Decode(string(v))
	if err != nil {
		return plan.Plan{}, fmt.Errorf("the job's plan: %w: %w", err, bootstrap.ErrEnv)
	}
	if name, job, here, differ := p.Settings().Diff(mine.Settings()); differ {
		log.Info("taking the job's plan", "setting", name, "job", job, "this_process", here)
	}
	return p, nil
}

// TakeRank takes a fresh job rank for a replacement of a job of size
// ranks: the first past size not taken yet, of the spare the job can
// link to.
func TakeRank(ctx context.Context, store Store, size, spare int) (int, error) {
	taken, err := store.Scan(ctx, joinRankPrefix)
	if err != nil {
		return -1, err
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	mine := hex.EncodeToString(nonce[:])
	for j := size + len(taken); j < size+spare; j++ {
		v, err := store.Create(ctx, joinRankPrefix+strconv.Itoa(j), []byte(mine))
		if err != nil {
			return -1, err
		}
		if string(v) == mine {
			return j, nil
		}
	}
	return -1, fmt.Errorf("the job admitted its %d replacements already: %w", spare, sentinel.Unsupported)
}

// SayWaiting tells the running job's members that replacement k, started
// at start, waits to be admitted (Pending counts it).
func SayWaiting(ctx context.Context, store Store, k int, start time.Time) error {
	return store.Put(ctx, pendingPrefix+strconv.Itoa(k), []byte("wait "+strconv.FormatInt(start.UnixNano(), 10)))
}

// Admitted waits until a Grow of the job of size ranks admits
// replacement k, and returns its admission. It fails with an error
// wrapping sentinel.Excluded if every member closed or left first, and
// with one wrapping sentinel.Timeout if ctx's deadline passes.
func Admitted(ctx context.Context, store Store, k, size int) (Admission, error) {
	key := pendingPrefix + strconv.Itoa(k)
	ended := func() (Admission, error) {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Admission{}, fmt.Errorf("%w: no Grow admitted it: %w", sentinel.Timeout, context.Cause(ctx))
		}
		return Admission{}, fmt.Errorf("no Grow admitted it before its context ended: %w", context.Cause(ctx))
	}
	for polls := 1; ; polls++ {
		m, err := store.Scan(ctx, key)
		if err == nil && polls%int(pendingEvery/joinPoll) == 0 {
			var over bool
			if over, err = jobOver(ctx, store, size); err == nil && over {
				return Admission{}, fmt.Errorf("%w: the job ended (every member closed or left) before a Grow admitted it", sentinel.Excluded)
			}
		}
		if err != nil && ctx.Err() != nil {
			return ended()
		}
		if err != nil {
			return Admission{}, fmt.Errorf("waiting to be admitted: %w", err)
		}
		if v := string(m[key]); strings.HasPrefix(v, "admit ") {
			return parseAdmission(v)
		}
		select {
		case <-ctx.Done():
			return ended()
		case <-time.After(joinPoll):
		}
	}
}

// jobOver says whether every member of the running job (its first size
// ranks and the replacements admitted since) closed its communicator or
// left: a replacement still waiting then never will be admitted.
func jobOver(ctx context.Context, store Store, size int) (bool, error) {
	out, err := gone(ctx, store)
	if err != nil {
		return false, err
	}
	pending, err := store.Scan(ctx, pendingPrefix)
	if err != nil {
		return false, err
	}
	members := make([]int, 0, size)
	for j := range size {
		members = append(members, j)
	}
	for k, v := range pending {
		if j, err := strconv.Atoi(strings.TrimPrefix(k, pendingPrefix)); err == nil && strings.HasPrefix(string(v), "admit ") {
			members = append(members, j)
		}
	}
	for _, j := range members {
		if !out[j] {
			return false, nil
		}
	}
	return true, nil
}

package comm

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/plan"
	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport"
)

// The job's plan (package internal/plan) is agreed in two halves at Init:
// the settings through the store before the transports connect (rank 0
// publishes planKey, every other rank compares its own), the link cost
// and message size with Init's first allreduce once they have. An
// elastic job also publishes the whole plan, where a replacement takes
// it from (internal/elastic: SayRunning, JobPlan).
const planKey = "plan/settings"

// settingsPlan is the settings half of the plan s asks for, with the
// parsed GOCOLL_ALGO algos and the job's half accumulation.
func settingsPlan(s settings, algos map[collectives.Kind]collectives.Algo, halfAccum string) plan.Plan {
	p := plan.Plan{Algos: plan.Canon(algos), HalfAccum: halfAccum, Transport: s.Transport, Elastic: s.Elastic,
		Encrypt: s.TCP.Encrypt, TCPConnect: "lazy", RDMAConnect: "lazy"}
	if p.HalfAccum == "" {
		p.HalfAccum = bootstrap.HalfAccumFloat32
	}
	switch {
	case s.TCP.Eager:
		p.TCPConnect = "eager"
	case s.TCPWarm:
		p.TCPConnect = "warm"
	}
	if s.RDMA.Eager {
		p.RDMAConnect = "eager"
	}
	return p
}

// agreeSettings checks c.plan's settings against rank 0's, through the
// store: a rank whose differ fails, naming the setting and both values,
// and the others learn of it as of any rank that gave up in Init.
func (c *Communicator) agreeSettings(ctx context.Context, store *bootstrap.Client) error {
	mine := c.plan.Settings()
	if c.cfg.Rank == 0 {
		return store.Put(ctx, planKey, []byte(mine.Encode()))
	}
	v, err := store.Get(ctx, planKey)
	if err != nil {
		return err
	}
	theirs, err := plan.Decode(string(v))
	if err != nil {
		return fmt.Errorf("rank 0's settings: %w: %w", err, ErrEnv)
	}
	if name, v0, here, differ := theirs.Diff(mine); differ {
		err := fmt.Errorf("%s is %q on rank 0 but %q on rank %d (every rank must set it alike): %w", name, v0, here, c.cfg.Rank, ErrEnv)
		// With a reason, which a rank without a transport yet has no
		// other way to give: the others wait in the store for this
		// one's address, and learn from its departure why it never came.
		c.leave(err.Error())
		return err
	}
	return nil
}

// agreeTransports returns the smallest MaxMessage of every rank's
// transport, and whether any rank's transport has costly steps
// (transport.StepCoster): the plan's half that the transports decide.
// The collectives cut long buffers into messages of that size, and both
// ends of every link must cut alike: on a job whose hosts hold different
// numbers of ranks, a rank alone on its host has only TCP links while
// its peers' transport is the smaller of shared memory's slot and TCP's.
// It runs on the bare transport, before the mux that every later message
// goes through, so the user's first collective is call #1.
func agreeTransports(ctx context.Context, t transport.Transport) (maxMessage int, costly bool, err error) {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], uint64(t.MaxMessage()))
	if !transport.StepCostly(t) {
		binary.LittleEndian.PutUint64(b[8:], 1) // the minimum is 0 if any rank's steps are costly
	}
	if err := collectives.NewGroup(t, collectives.Options{}).AllReduce(ctx, b[:], reduce.Uint64, reduce.Min); err != nil {
		return 0, false, err
	}
	return int(binary.LittleEndian.Uint64(b[:])), binary.LittleEndian.Uint64(b[8:]) == 0, nil
}

// groupOptions are the collectives' options of c's plan, with c's logger.
func (c *Communicator) groupOptions() (collectives.Options, error) {
	o, err := c.plan.Options()
	o.Logger = c.log
	return o, err
}

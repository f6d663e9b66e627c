package comm

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/logging"
)

// ErrLauncherGone: the process that started this rank (mpirun's daemon,
// torchrun's agent, grun, slurmstepd) exited while the rank ran.
var ErrLauncherGone = bootstrap.ErrLauncherGone

// ErrJoinRefused: the rendezvous turned this rank away: its rank had
// joined already, the store serves another job (two jobs sharing a
// rendezvous port and no GRUN_TOKEN), or, in a job without GRUN_TOKEN,
// the store did not admit a rank of another host (under torchrun or Open
// MPI, or under Slurm without a valid munge credential), or this rank
// did not trust the store (a process of another user holds its port on
// this host, or under Slurm a store of another host did not prove itself
// with munge); the error says why and what to set.
var ErrJoinRefused = bootstrap.ErrJoinRefused

// launchConfig is the job Init joins: the launcher's, or, in a process no
// launcher started, a job of this one rank.
func launchConfig(lookup func(string) (string, bool)) (Config, error) {
	if cfg, alone := bootstrap.Singleton(lookup); alone {
		return cfg, nil
	}
	return bootstrap.FromEnv(lookup)
}

// saySingleton says, once per Init, that no launcher started this process,
// so a user who meant to start several ranks learns why there is one.
func saySingleton(c *Communicator) {
	if c.cfg.Source == "singleton" {
		c.log.Info("no launcher environment (no GRUN_*, torchrun, Open MPI or Slurm variables): running as a job of one rank; start the program with grun -n N for more")
	}
}

// launcherPoll is how often a rank checks that its launcher lives.
const launcherPoll = 250 * time.Millisecond

// watchLauncher makes a rank that Init started leave when its launcher is
// gone, as srun and grun make their ranks leave when they end them: it
// cancels Init, aborts the communicator (collectives fail with
// ErrLauncherGone), logs why, and sends this process SIGTERM, which ends a
// program that did not ask for it and lets one that did shut down in order.
// A rank whose launcher was SIGKILLed would otherwise compute forever: all
// its peers live, so no link fails.
//
// Only a process a launcher started is watched (grun's, or one whose
// launcher gave a job identity): ranks started by hand with RANK and
// WORLD_SIZE from a script that goes on its way, or by a container runtime,
// have no launcher to outlive.
func watchLauncher(cfg Config, cancel context.CancelCauseFunc, c *atomic.Pointer[Communicator]) {
	if cfg.Source != "grun" && cfg.Job == "" {
		return
	}
	bootstrap.WatchParent(launcherPoll, func(parent int) {
		err := fmt.Errorf("rank %d of %d: %w (%s, pid %d, exited); leaving", cfg.Rank, cfg.Size, ErrLauncherGone, cfg.Source, parent)
		logging.L().Error(err.Error(), "rank", cfg.Rank)
		cancel(err)
		if comm := c.Load(); comm != nil {
			comm.Abort(err)
		}
		terminate()
	})
}

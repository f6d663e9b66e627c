package bootstrap

import (
	"errors"
	"os"
	"sync"
	"time"
)

// ErrLauncherGone reports that the process that started this rank (grun,
// mpirun's daemon, torchrun's agent, slurmstepd) exited while the rank
// still ran: nobody is left to collect its result or to stop it.
var ErrLauncherGone = errors.New("the launcher that started this rank is gone")

// WatchParent calls gone, once, with the parent's pid when this process's
// parent exits, checking every interval; stop ends the watch. A killed
// mpirun or torchrun leaves its ranks computing with all their peers alive,
// so no link fails: only the parent's death tells.
//
// It polls getppid, which changes (to 1 or a subreaper) when the parent
// exits. PR_SET_PDEATHSIG was the alternative: it fires when the parent
// *thread* that forked us exits, which in a multi-threaded launcher (Python
// threads, Go's runtime) need not be the launcher's end, it must be set
// from the rank's own thread before the parent could have died, and it
// kills without a word. A pidfd of the parent would wake at once, but the
// parent may have died before we open it (the pid then names another
// process or none). A getppid call every interval costs nothing measurable
// and is portable. A process whose parent is already init (pid 1, or 0 in
// a container where the rank is the first process) has no launcher to
// watch.
func WatchParent(interval time.Duration, gone func(parent int)) (stop func()) {
	parent := os.Getppid()
	done := make(chan struct{})
	var once sync.Once
	stop = func() { once.Do(func() { close(done) }) }
	if parent <= 1 {
		return stop
	}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if os.Getppid() != parent {
				gone(parent)
				return
			}
		}
	}()
	return stop
}

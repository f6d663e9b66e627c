package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/freeport"
	"github.com/gocoll/gocoll/internal/testmode"
)

// launcherEnv is this process's environment without anything a launcher
// sets, so that the test's own variables alone decide who started the rank.
func launcherEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "GRUN_"), strings.HasPrefix(name, "OMPI_"), strings.HasPrefix(name, "SLURM_"),
			strings.HasPrefix(name, "PMI"), strings.HasPrefix(name, "MASTER_"), strings.HasPrefix(name, "TORCHELASTIC_"),
			name == "RANK", name == "WORLD_SIZE", name == "LOCAL_RANK", name == "LOCAL_WORLD_SIZE", name == "GOCOLL_DEBUG":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// launcherStyles are the variables srun, mpirun and torchrun set for rank
// r of size on one host (plus, for srun and mpirun, the MASTER_ADDR and
// MASTER_PORT the job script must add), and no GRUN_TOKEN.
var launcherStyles = []struct {
	name string
	env  func(r, size int, port string) []string
}{
	{"srun", func(r, size int, port string) []string {
		n := strconv.Itoa(size)
		return []string{"SLURM_PROCID=" + strconv.Itoa(r), "SLURM_NTASKS=" + n, "SLURM_LOCALID=" + strconv.Itoa(r),
			"SLURM_NODEID=0", "SLURM_JOB_NODELIST=localhost", "SLURM_TASKS_PER_NODE=" + n, "SLURM_JOB_ID=4242", "SLURM_STEP_ID=0",
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port}
	}},
	{"mpirun", func(r, size int, port string) []string {
		n := strconv.Itoa(size)
		return []string{"OMPI_COMM_WORLD_RANK=" + strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE=" + n,
			"OMPI_COMM_WORLD_LOCAL_RANK=" + strconv.Itoa(r), "OMPI_COMM_WORLD_LOCAL_SIZE=" + n, "OMPI_MCA_ess_base_jobid=1791819777",
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port}
	}},
	{"torchrun", func(r, size int, port string) []string {
		n := strconv.Itoa(size)
		return []string{"RANK=" + strconv.Itoa(r), "WORLD_SIZE=" + n, "LOCAL_RANK=" + strconv.Itoa(r), "LOCAL_WORLD_SIZE=" + n,
			"GROUP_RANK=0", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port}
	}},
}

// TestUnderOtherLaunchers starts collcheck's ranks as srun, mpirun and
// torchrun would (launcherStyles; srun's with a token, as a job script
// may pass one), and no grun: comm.Init must find its rank in them, rank
// 0 must serve the rendezvous store, and every collective check must pass
// on every rank.
func TestUnderOtherLaunchers(t *testing.T) {
	testmode.SkipIfQuick(t)
	const n = 3
	for _, st := range launcherStyles {
		t.Run(st.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			port := freeport.Get(t)
			cmds := make([]*exec.Cmd, n)
			outs := make([]*bytes.Buffer, n)
			for r := 0; r < n; r++ {
				cmd := exec.CommandContext(ctx, filepath.Join(bin, "collcheck"))
				cmd.Env = append(append(launcherEnv(), "GOCOLL_TIMEOUT=60s"), st.env(r, n, port)...)
				if st.name == "srun" {
					cmd.Env = append(cmd.Env, "GRUN_TOKEN=job-secret-from-the-script")
				}
				outs[r] = &bytes.Buffer{}
				cmd.Stdout, cmd.Stderr = outs[r], outs[r]
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds[r] = cmd
			}
			for r, cmd := range cmds {
				err := cmd.Wait()
				if ctx.Err() != nil {
					t.Fatalf("rank %d did not finish in time (a hang):\n%s", r, outs[r])
				}
				if err != nil {
					t.Errorf("rank %d: %v:\n%s", r, err, outs[r])
				}
				if want := fmt.Sprintf("rank %d of %d: ok", r, n); !strings.Contains(outs[r].String(), want) {
					t.Errorf("rank %d: no %q in its output:\n%s", r, want, outs[r])
				}
			}
		})
	}
}

// TestTwoJobsOnePort starts two 2-rank jobs at once, as srun would, with
// the same MASTER_PORT and no GRUN_TOKEN (issue 27): one job's rank 0
// serves the store, and the other job must neither join it nor wait out
// its timeout; its ranks fail at once saying why. The first job succeeds.
func TestTwoJobsOnePort(t *testing.T) {
	testmode.SkipIfQuick(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	port := freeport.Get(t)
	type rank struct {
		job, r int
		cmd    *exec.Cmd
		out    bytes.Buffer
	}
	var ranks []*rank
	for job := 0; job < 2; job++ {
		for r := 0; r < 2; r++ {
			k := &rank{job: job, r: r}
			k.cmd = exec.CommandContext(ctx, filepath.Join(bin, "collcheck"))
			k.cmd.Env = append(launcherEnv(), "GOCOLL_TIMEOUT=60s", "SLURM_PROCID="+strconv.Itoa(r), "SLURM_NTASKS=2",
				"SLURM_LOCALID="+strconv.Itoa(r), "SLURM_JOB_ID="+strconv.Itoa(900+job), "SLURM_STEP_ID=0",
				"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port)
			k.cmd.Stdout, k.cmd.Stderr = &k.out, &k.out
			if err := k.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			ranks = append(ranks, k)
		}
	}
	start := time.Now()
	okJobs := map[int]int{}
	var failures []*rank
	for _, k := range ranks {
		err := k.cmd.Wait()
		if ctx.Err() != nil {
			t.Fatalf("job %d rank %d did not finish in time (a hang):\n%s", k.job, k.r, &k.out)
		}
		if err == nil && strings.Contains(k.out.String(), fmt.Sprintf("rank %d of 2: ok", k.r)) {
			okJobs[k.job]++
		} else {
			failures = append(failures, k)
		}
	}
	if len(okJobs) != 1 || len(failures) != 2 {
		for _, k := range ranks {
			t.Logf("job %d rank %d:\n%s", k.job, k.r, &k.out)
		}
		t.Fatalf("jobs that succeeded: %v; want exactly one, whole, and the other's two ranks failed", okJobs)
	}
	for _, k := range failures {
		out := k.out.String()
		if !strings.Contains(out, "another job") && !strings.Contains(out, "in use by another process") {
			t.Errorf("job %d rank %d failed without saying another job holds the port:\n%s", k.job, k.r, out)
		}
		if strings.Contains(out, "unreachable too") {
			t.Errorf("job %d rank %d asked the other job's store for departures:\n%s", k.job, k.r, out)
		}
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the jobs took %v: the losing one waited instead of failing", d)
	}
}

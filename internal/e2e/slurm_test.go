//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/testmode"
)

// slurm is a two-node Slurm cluster the test starts itself: slurmctld in
// the cluster's launcher namespace, one slurmd per host namespace (nodes
// n1 and n2, two slurmd on one machine, each on a port of its own), munge
// for their authentication. Commands (srun, sbatch, ...) run in the
// launcher namespace, as on a login node.
type slurm struct {
	c     *cluster
	dir   string
	conf  string
	hosts string // the hosts file naming the nodes
}

// slurmNodes are the node names, in the order of the cluster's hosts.
var slurmNodes = []string{"n1", "n2"}

func newSlurm(t *testing.T) *slurm {
	t.Helper()
	for _, b := range []string{"slurmctld", "slurmd", "munged", "srun", "salloc", "sbatch", "squeue", "sinfo", "scontrol"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s not found: this test runs a real Slurm cluster (apt-get install slurm-wlm munge; .ci/install does)", b)
		}
	}
	c := newCluster(t, len(slurmNodes))
	s := &slurm{c: c, dir: t.TempDir()}
	if err := os.Chmod(s.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	// The node names resolve through a hosts file of the cluster's own,
	// mounted over /etc/hosts for what runs in it (see cmd), so the
	// machine's own is untouched.
	hosts := fmt.Sprintf("127.0.0.1 localhost\n%s %s\n", c.launchIP, host)
	for i, n := range slurmNodes {
		hosts += fmt.Sprintf("%s %s\n", c.hosts[i], n)
	}
	s.hosts = filepath.Join(s.dir, "hosts")
	if err := os.WriteFile(s.hosts, []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	s.startMunge(t)
	var nodes strings.Builder
	for i, n := range slurmNodes {
		fmt.Fprintf(&nodes, "NodeName=%s NodeAddr=%s CPUs=4 Port=%d State=UNKNOWN\n", n, c.hosts[i], 17001+i)
	}
	conf := fmt.Sprintf(`ClusterName=gocolltest
SlurmctldHost=%[1]s(%[2]s)
SlurmctldPort=16817
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=%[3]s/state
SlurmdSpoolDir=%[3]s/spool-%%n
SlurmctldPidFile=%[3]s/slurmctld.pid
SlurmdPidFile=%[3]s/slurmd-%%n.pid
SlurmctldLogFile=%[3]s/slurmctld.log
SlurmdLogFile=%[3]s/slurmd-%%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
%[4]sPartitionName=test Nodes=%[5]s Default=YES MaxTime=INFINITE State=UP
`, host, c.launchIP, s.dir, nodes.String(), strings.Join(slurmNodes, ","))
	for _, d := range []string{"state", "spool-n1", "spool-n2"} {
		if err := os.MkdirAll(filepath.Join(s.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.conf = filepath.Join(s.dir, "slurm.conf")
	if err := os.WriteFile(s.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// Daemons stop by their pid files; the cluster's cleanup then kills
	// whatever is left in its namespaces.
	t.Cleanup(func() {
		var pids []int
		for _, f := range []string{"slurmd-n1.pid", "slurmd-n2.pid", "slurmctld.pid"} {
			if b, err := os.ReadFile(filepath.Join(s.dir, f)); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					syscall.Kill(pid, syscall.SIGTERM)
					pids = append(pids, pid)
				}
			}
		}
		// slurmctld saves its state as it stops: wait for the daemons
		// to be gone, or the test's temporary directory is removed
		// while they still write into it.
		deadline := time.Now().Add(15 * time.Second)
		for _, pid := range pids {
			for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	s.run(t, c.launcher, 10*time.Second, "slurmctld", "-f", s.conf)
	for i, n := range slurmNodes {
		s.run(t, c.ns[c.hosts[i]], 10*time.Second, "slurmd", "-f", s.conf, "-N", n)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := s.cmd(context.Background(), c.launcher, "sinfo", "-h", "-N", "-o", "%N %T").CombinedOutput()
		if strings.Count(string(out), "idle") == len(slurmNodes) {
			break
		}
		if time.Now().After(deadline) {
			logs, _ := exec.Command("sh", "-c", "tail -n 20 "+s.dir+"/*.log").CombinedOutput()
			t.Fatalf("the Slurm nodes did not come up within 30 s: sinfo says %q\n%s", out, logs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return s
}

// startMunge starts munged, as the munge user, unless one already
// answers on the default socket, which Slurm uses. A munged running is
// not enough: bootstrap's tests run munged of their own, on sockets of
// their own, while this package runs.
func (s *slurm) startMunge(t *testing.T) {
	t.Helper()
	if exec.Command("munge", "-n").Run() == nil {
		return
	}
	if err := os.MkdirAll("/run/munge", 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chown", "munge:munge", "/run/munge").CombinedOutput(); err != nil {
		t.Fatalf("chown /run/munge: %v\n%s", err, out)
	}
	if out, err := exec.Command("runuser", "-u", "munge", "--", "munged").CombinedOutput(); err != nil {
		t.Fatalf("munged: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile("/run/munge/munged.pid"); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGTERM)
			}
		}
	})
}

// cmd is a command in namespace ns with the cluster's configuration: in
// the namespace's network (not through ip netns exec, whose fresh /sys
// has no cgroups, which slurmd needs), and in a mount namespace of its
// own where the cluster's hosts file is /etc/hosts.
func (s *slurm) cmd(ctx context.Context, ns string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + ns,
		"unshare", "-m", "--propagation", "private",
		"sh", "-c", `mount --bind "$0" /etc/hosts && exec "$@"`, s.hosts, name}, args...)...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+s.conf, "GOCOLL_DEBUG=", "GORACE=atexit_sleep_ms=0")
	return cmd
}

// run runs a command that must succeed within timeout (the daemons fork
// into the background and return).
func (s *slurm) run(t *testing.T, ns string, timeout time.Duration, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if out, err := s.cmd(ctx, ns, name, args...).CombinedOutput(); err != nil {
		logs, _ := exec.Command("sh", "-c", "tail -n 20 "+s.dir+"/*.log").CombinedOutput()
		t.Fatalf("%s %s: %v\n%s\n%s", name, strings.Join(args, " "), err, out, logs)
	}
}

// shell runs a shell script on the login node (the launcher namespace) in
// dir, and returns its output, exit status and how long it took.
func (s *slurm) shell(t *testing.T, dir string, timeout time.Duration, script string) (string, int, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := s.cmd(ctx, s.c.launcher, "bash", "-c", script)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	end := time.Now()
	if ctx.Err() != nil {
		t.Fatalf("%q did not finish within %v (a hang):\n%s", script, timeout, out.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code, end
}

// TestSlurm runs the README's Slurm recipe, exactly as written, on a real
// two-node Slurm cluster (two network-namespace hosts, so ranks talk TCP
// between nodes and shared memory within): inside an allocation from
// salloc, and as an sbatch script; then collbench over 4 ranks with tcp
// and the automatic shm+tcp; then a rank SIGKILLed under srun, which
// every survivor must name, srun exiting non-zero and nothing left
// running.
func TestSlurm(t *testing.T) {
	testmode.SkipIfQuick(t)
	s := newSlurm(t)
	recipe := readmeRecipe(t, "Slurm")
	// 2 nodes x 4 tasks, as the recipe says; each node declares 4 CPUs.
	t.Run("salloc", func(t *testing.T) {
		dir, _ := trainDir(t, "allreduce")
		out, code, _ := s.shell(t, dir, 2*time.Minute, "salloc -N 2 --ntasks-per-node 4 bash -c '"+recipe+"'")
		if code != 0 || !strings.Contains(out, "allreduce ok: 8 ranks") {
			t.Fatalf("salloc + recipe: exit %d, want 0 and rank 0's 'allreduce ok: 8 ranks':\n%s", code, out)
		}
	})
	t.Run("sbatch", func(t *testing.T) {
		dir, _ := trainDir(t, "allreduce")
		script := "#!/bin/bash\n#SBATCH -N 2 --ntasks-per-node 4 -o " + dir + "/out.txt\n" + recipe + "\n"
		if err := os.WriteFile(filepath.Join(dir, "job.sh"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		out, code, _ := s.shell(t, dir, 30*time.Second, "sbatch --parsable job.sh")
		id := strings.TrimSpace(out)
		if code != 0 || id == "" {
			t.Fatalf("sbatch: exit %d: %s", code, out)
		}
		// sbatch --wait backs off to seconds between polls: poll squeue.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			q, _, _ := s.shell(t, dir, 10*time.Second, "squeue -h -j "+id)
			if strings.TrimSpace(q) == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s still queued or running after 2 min: %s", id, q)
			}
			time.Sleep(100 * time.Millisecond)
		}
		state, _, _ := s.shell(t, dir, 10*time.Second, "scontrol show job "+id)
		b, _ := os.ReadFile(filepath.Join(dir, "out.txt"))
		if !strings.Contains(state, "JobState=COMPLETED") || !strings.Contains(string(b), "allreduce ok: 8 ranks") {
			t.Fatalf("batch job %s:\n%s\noutput:\n%s", id, state, b)
		}
	})
	t.Run("collbench", func(t *testing.T) {
		dir, _ := trainDir(t, "collbench")
		for _, tr := range []string{"tcp", "auto"} {
			out, code, _ := s.shell(t, dir, 2*time.Minute, "salloc -N 2 --ntasks-per-node 2 bash -c '"+
				strings.Replace(recipe, "--ntasks-per-node 4 ./train", "--ntasks-per-node 2 ./train -transport "+tr+" -min 8 -max 512K -factor 16 -iters 5 -format json", 1)+"'")
			if code != 0 || !strings.Contains(out, "524288") || !strings.Contains(out, `"ranks": 4`) {
				t.Fatalf("collbench over %s, 2 nodes x 2: exit %d:\n%s", tr, code, out)
			}
			want := map[string]string{"tcp": "tcp", "auto": "shm+tcp"}[tr]
			if !strings.Contains(out, `"transport": "`+want+`"`) {
				t.Errorf("collbench -transport %s did not run over %s:\n%s", tr, want, out)
			}
		}
	})
	t.Run("stall", func(t *testing.T) {
		// Rank 3 sleeps before its third allreduce; with no grun, the
		// lowest rank waiting prints the report and writes it.
		dir, _ := trainDir(t, "straggler")
		out, code, _ := s.shell(t, dir, 2*time.Minute, "salloc -N 2 --ntasks-per-node 2 bash -c 'export GOCOLL_STALL=1s; "+
			strings.Replace(recipe, "--ntasks-per-node 4 ./train", "--ntasks-per-node 2 ./train -late 3 -for 3s", 1)+"'")
		if code != 0 {
			t.Fatalf("straggler under srun: exit %d:\n%s", code, out)
		}
		for _, want := range []string{
			`gocoll stall report: rank \d: allreduce #3 .* has waited 1s`,
			`in it: ranks 0-2, waiting up to`,
			`rank 3 finished allreduce #2 .* ago and has not entered #3`,
			`its main goroutine \[sleep\] is in main.dawdle`,
		} {
			if !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("report does not say %q:\n%s", want, out)
			}
		}
		if n := strings.Count(out, "gocoll stall report:"); n != 1 {
			t.Errorf("%d reports, want 1:\n%s", n, out)
		}
		if files, _ := filepath.Glob(filepath.Join(dir, "gocoll-stall-*.txt")); len(files) != 1 {
			t.Errorf("report files %v, want 1", files)
		}
	})
	t.Run("kill", func(t *testing.T) {
		dir, _ := trainDir(t, "chaos")
		start := time.Now()
		out, code, end := s.shell(t, dir, 2*time.Minute, "salloc -N 2 --ntasks-per-node 2 bash -c '"+
			strings.Replace(recipe, "--ntasks-per-node 4 ./train", "--ntasks-per-node 2 ./train -victim 1 -after 500ms", 1)+"'")
		killAt, last := int64(0), int64(0)
		named := 0
		for _, line := range strings.Split(out, "\n") {
			if m := regexp.MustCompile(`chaos: kill rank 1 at (\d+)`).FindStringSubmatch(line); m != nil {
				killAt, _ = strconv.ParseInt(m[1], 10, 64)
			}
			if m := regexp.MustCompile(`chaos: rank (\d+) failed at (\d+): (.*)`).FindStringSubmatch(line); m != nil {
				at, _ := strconv.ParseInt(m[2], 10, 64)
				last = max(last, at)
				// The one-line error says how rank 1 went ("died", "killed
				// by signal ...") or that it was lost.
				if regexp.MustCompile(`rank 1 (died|killed)|rank 1: peer lost|lost rank 1`).MatchString(m[3]) {
					named++
				} else {
					t.Errorf("rank %s's error does not name rank 1 as lost: %s", m[1], m[3])
				}
			}
		}
		if killAt == 0 || named != 3 || code == 0 {
			t.Fatalf("kill rank 1 of 4 under srun: %d survivors named it (want 3), exit %d (want non-zero):\n%s", named, code, out)
		}
		t.Logf("srun, rank 1 of 4 SIGKILLed: 3/3 survivors named it, the last after %v; srun exited after %v (status %d); whole run %v",
			time.Duration(last-killAt).Round(time.Millisecond), end.Sub(time.Unix(0, killAt)).Round(time.Millisecond), code,
			time.Since(start).Round(time.Millisecond))
		if left := leftRunning(filepath.Join(dir, "train")); left != "" {
			t.Errorf("left running: %s", left)
		}
	})
}

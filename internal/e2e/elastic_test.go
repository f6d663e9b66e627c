//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/testmode"
)

// elasticPlan is one run of examples/elastic under grun --elastic 2: who
// dies when.
type elasticPlan struct {
	transport string // GOCOLL_TRANSPORT
	fakeHosts string // GOCOLL_FAKE_HOSTS, for shm+tcp on one machine
	victim    int    // job rank that kills itself at step
	step      int
	inShrink  int // job rank that dies while the others shrink, or -1
}

func (p elasticPlan) String() string {
	s := fmt.Sprintf("%s: rank %d killed at step %d", p.transport, p.victim, p.step)
	if p.fakeHosts != "" {
		s = fmt.Sprintf("%s on hosts %s: rank %d killed at step %d", p.transport, p.fakeHosts, p.victim, p.step)
	}
	if p.inShrink >= 0 {
		s += fmt.Sprintf(", rank %d while the others shrink", p.inShrink)
	}
	return s
}

// elasticPad is the example's -pad: the gradient's allreduce grows,
// step by step, from 32 KiB to 2 MiB, so that on 2 to 4 ranks, over every
// transport, the steps run recursive doubling, the ring and Rabenseifner
// before and after a shrink or a grow, each result checked.
const elasticPad = "4096,16384,131072,262144"

func (p elasticPlan) args() []string {
	a := []string{"-pad", elasticPad, "-kill", fmt.Sprintf("%d@%d", p.victim, p.step)}
	if p.inShrink >= 0 {
		a = append(a, "-kill-in-shrink", strconv.Itoa(p.inShrink))
	}
	return a
}

// TestElastic runs the elastic example, a data-parallel training loop of
// 4 ranks under grun --elastic 2, and SIGKILLs ranks at random steps:
// rank 0 among them (under grun the store lives in grun, so any rank may
// die), and in half the runs a second rank as the survivors agree on who
// is left. Over tcp, shm and shm+tcp, the survivors must shrink, go on
// from the same step and end with the same parameters, bitwise, and grun
// must exit 0 saying which ranks the job lost. The plans are seeded
// (GOCOLL_ELASTIC_SEED replays them); the test prints the time from each
// kill to the survivors' first successful collective after it.
func TestElastic(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("GOCOLL_ELASTIC_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("GOCOLL_ELASTIC_SEED=%q: %v", v, err)
		}
	}
	t.Logf("elastic: seed %d (GOCOLL_ELASTIC_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	var plans []elasticPlan
	setups := [][2]string{{"tcp", ""}, {"shm", ""}, {"auto", "1,3"}}
	if testmode.Quick() {
		setups = setups[2:] // shm and tcp both; the full run has each alone
	}
	if tr := os.Getenv("GOCOLL_ELASTIC_TRANSPORT"); tr != "" {
		// One transport alone: rdma, in the VM (transport/rdma/vmtest/ci).
		setups = [][2]string{{tr, ""}}
	}
	runs := 2
	if testmode.Quick() {
		runs = 1
	}
	for i := range runs * len(setups) {
		setup := setups[i%len(setups)]
		p := elasticPlan{transport: setup[0], fakeHosts: setup[1], victim: rng.IntN(4), step: 5 + rng.IntN(120), inShrink: -1}
		if i < len(setups) {
			p.victim = 0 // every transport loses the rank that would serve the store under other launchers
		}
		if i%2 == 1 {
			p.inShrink = (p.victim + 1 + rng.IntN(3)) % 4
		}
		plans = append(plans, p)
	}
	var worst time.Duration
	for _, p := range plans {
		t.Run(p.String(), func(t *testing.T) {
			env := []string{"GOCOLL_TRANSPORT=" + p.transport, "GOCOLL_FAKE_HOSTS=" + p.fakeHosts, "GOCOLL_TIMEOUT=30s"}
			out, code := grun(t, 2*time.Minute, env, append([]string{"-n", "4", "--elastic", "2", filepath.Join(bin, "elastic")}, p.args()...)...)
			lost := checkElastic(t, out, code, 4)
			if !slices.Contains(lost, p.victim) {
				t.Errorf("rank %d was killed but grun does not list it as lost (%v):\n%s", p.victim, lost, out)
			}
			if d := killToResume(t, out); d > worst {
				worst = d
			}
		})
	}
	t.Logf("elastic: seed %d, %d runs, worst time from a kill to the survivors' first collective after it: %v", seed, len(plans), worst)
	fmt.Printf("elastic: seed %d, %d runs, worst time from a kill to the survivors' first collective after it: %v\n", seed, len(plans), worst)
}

// TestElasticAcrossHosts: the same across two network-namespace hosts of
// two ranks each, a rank of the second host killed mid-run; the store is
// grun's, in a third namespace.
func TestElasticAcrossHosts(t *testing.T) {
	testmode.SkipIfQuick(t)
	c := newCluster(t, 2)
	_, done := c.grunIn(t, 2*time.Minute, nil, "-H", c.hosts[0]+":2,"+c.hosts[1]+":2", "--rsh", c.rsh(t),
		"--elastic", "2", "-x", "GOCOLL_TIMEOUT=30s", filepath.Join(bin, "elastic"), "-kill", "3@60")
	out, code := done()
	lost := checkElastic(t, out, code, 4)
	if !slices.Equal(lost, []int{3}) {
		t.Errorf("grun lists ranks %v as lost, want [3]:\n%s", lost, out)
	}
	d := killToResume(t, out)
	t.Logf("elastic across hosts: %v from the kill to the survivors' first collective after it", d)
	fmt.Printf("elastic across hosts: %v from the kill to the survivors' first collective after it\n", d)
	c.checkEmpty(t)
}

var (
	elasticDone   = regexp.MustCompile(`(?m)^elastic: rank (\d+): 150 of 150 steps done on (\d+) ranks after (\d+) shrinks in \S+, loss (\S+), params ([0-9a-f]+)$`)
	elasticLost   = regexp.MustCompile(`(?m)^grun: the job finished with (\d+) of (\d+) ranks; lost (.*) \(--elastic 2\)$`)
	elasticKill   = regexp.MustCompile(`(?m)^elastic: rank (\d+) kills itself .* \(t=(\d+)\)$`)
	elasticResume = regexp.MustCompile(`(?m)^elastic: rank (\d+): \d+ ranks left, going on from step (\d+) .*; t=(\d+)\)$`)
)

// checkElastic checks a run of the elastic example of n ranks: grun
// exited 0 naming the lost ranks, every survivor finished with the same
// parameters and a small loss, on as many ranks as survived. It returns
// the lost ranks.
func checkElastic(t *testing.T, out string, code, n int) []int {
	t.Helper()
	if code != 0 {
		t.Fatalf("grun exited %d, want 0:\n%s", code, out)
	}
	m := elasticLost.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("grun does not say which ranks the job lost (%v):\n%s", elasticLost, out)
	}
	var lost []int
	for _, f := range strings.Split(m[3], ", ") {
		// "rank 3", or "rank 3 on host 198.18.0.3"
		num, _, _ := strings.Cut(strings.TrimPrefix(f, "rank "), " ")
		r, err := strconv.Atoi(num)
		if err != nil {
			t.Fatalf("lost rank %q: %v", f, err)
		}
		lost = append(lost, r)
	}
	survivors := n - len(lost)
	done := elasticDone.FindAllStringSubmatch(out, -1)
	if len(done) != survivors || m[1] != strconv.Itoa(survivors) {
		t.Fatalf("%d ranks finished and grun says %s did, want %d (%d lost):\n%s", len(done), m[1], survivors, len(lost), out)
	}
	for _, d := range done {
		r, _ := strconv.Atoi(d[1])
		if slices.Contains(lost, r) {
			t.Errorf("rank %d finished but grun lists it as lost:\n%s", r, out)
		}
		if d[2] != strconv.Itoa(survivors) {
			t.Errorf("rank %d finished on %s ranks, want %d", r, d[2], survivors)
		}
		if d[5] != done[0][5] {
			t.Errorf("rank %d ended with parameters %s, rank %s with %s: the survivors disagree", r, d[5], done[0][1], done[0][5])
		}
		if loss, err := strconv.ParseFloat(d[4], 64); err != nil || loss > 1e-3 {
			t.Errorf("rank %d: loss %s, want the model fitted (below 1e-3)", r, d[4])
		}
	}
	return lost
}

// killToResume is the longest time from a kill to the next line of a
// survivor that went on after it: its first successful collective (the
// broadcast of the model) on the shrunk communicator.
func killToResume(t *testing.T, out string) time.Duration {
	t.Helper()
	var kills []int64
	for _, m := range elasticKill.FindAllStringSubmatch(out, -1) {
		at, _ := strconv.ParseInt(m[2], 10, 64)
		kills = append(kills, at)
	}
	slices.Sort(kills)
	var resumes []int64
	for _, m := range elasticResume.FindAllStringSubmatch(out, -1) {
		at, _ := strconv.ParseInt(m[3], 10, 64)
		resumes = append(resumes, at)
	}
	if len(kills) == 0 || len(resumes) == 0 {
		t.Fatalf("no kill or no survivor going on after it:\n%s", out)
	}
	var worst time.Duration
	for i, k := range kills {
		// The resumes after this kill and before the next one.
		next := int64(1 << 62)
		if i+1 < len(kills) {
			next = kills[i+1]
		}
		for _, r := range resumes {
			if r > k && r < next {
				worst = max(worst, time.Duration(r-k))
			}
		}
	}
	if worst > 10*time.Second { // a hang, not a slow machine: the figures are printed
		t.Errorf("the survivors took %v after a kill to go on", worst)
	}
	return worst
}

// TestElasticGrow runs the elastic example under grun --elastic 2:4 and
// SIGKILLs a random rank (rank 0 included) at a random step, over tcp,
// shm and shm+tcp (fake hosts of 1 and 3 ranks: rank 0 alone on TCP, the
// others shm+tcp), as TestElastic does; GOCOLL_ELASTIC_TRANSPORT picks
// one transport alone. grun starts a replacement, whose Init waits until
// the survivors, having shrunk, see it in Pending and Grow; it links to
// them over TCP, whatever they use among themselves. The job must end
// with 4 ranks, one of them the replacement, all with the same
// parameters, bitwise, and grun must say so. The test prints, per
// transport, the time from the replacement's start to its first step on
// the grown communicator (every rank past its Grow).
func TestElasticGrow(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("GOCOLL_ELASTIC_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("GOCOLL_ELASTIC_SEED=%q: %v", v, err)
		}
	}
	t.Logf("elastic grow: seed %d (GOCOLL_ELASTIC_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	setups := [][2]string{{"tcp", ""}, {"shm", ""}, {"auto", "1,3"}}
	if testmode.Quick() {
		setups = setups[2:] // shm and tcp both; the full run has each alone
	}
	if tr := os.Getenv("GOCOLL_ELASTIC_TRANSPORT"); tr != "" {
		setups = [][2]string{{tr, ""}}
	}
	for _, setup := range setups {
		victim, step := rng.IntN(4), 10+rng.IntN(80)
		name := setup[0]
		if setup[1] != "" {
			name = fmt.Sprintf("shm+tcp (%s on hosts %s)", setup[0], setup[1])
		}
		t.Run(fmt.Sprintf("%s: rank %d killed at step %d", name, victim, step), func(t *testing.T) {
			env := []string{"GOCOLL_TRANSPORT=" + setup[0], "GOCOLL_FAKE_HOSTS=" + setup[1], "GOCOLL_TIMEOUT=30s"}
			out, code := grun(t, 2*time.Minute, env, "-n", "4", "--elastic", "2:4",
				filepath.Join(bin, "elastic"), "-pad", elasticPad, "-kill", fmt.Sprintf("%d@%d", victim, step), "-pace", "5ms", "-final-size", "4")
			if code != 0 {
				t.Fatalf("grun exited %d, want 0:\n%s", code, out)
			}
			want := fmt.Sprintf("grun: the job finished with 4 ranks, 1 of them replacements; lost rank %d (--elastic 2:4)\n", victim)
			if !strings.Contains(out, want) {
				t.Fatalf("grun does not say %q:\n%s", want, out)
			}
			done := elasticGrown.FindAllStringSubmatch(out, -1)
			if len(done) != 4 {
				t.Fatalf("%d ranks finished, want 4:\n%s", len(done), out)
			}
			replacements := 0
			for _, d := range done {
				if d[1] == "replacement" {
					replacements++
				}
				if d[3] != "4" {
					t.Errorf("%s %s finished on %s ranks, want 4", d[1], d[2], d[3])
				}
				if d[5] != done[0][5] {
					t.Errorf("%s %s ended with parameters %s, %s %s with %s: the ranks disagree", d[1], d[2], d[5], done[0][1], done[0][2], done[0][5])
				}
				if loss, err := strconv.ParseFloat(d[4], 64); err != nil || loss > 1e-3 {
					t.Errorf("%s %s: loss %s, want the model fitted (below 1e-3)", d[1], d[2], d[4])
				}
			}
			if replacements != 1 {
				t.Errorf("%d replacements finished, want 1:\n%s", replacements, out)
			}
			m := elasticJoin.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("the replacement does not say when it took its first step:\n%s", out)
			}
			t.Logf("elastic grow over %s: %s from the replacement's start to its first step on the grown communicator of 4 ranks", name, m[1])
			fmt.Printf("elastic grow over %s: %s from the replacement's start to its first step on the grown communicator of 4 ranks\n", name, m[1])
		})
	}
}

// TestElasticGrowAcrossHosts: the same across two network-namespace
// hosts of two ranks each: rank 2, on the second host, is killed, and
// grun starts its replacement there, through --rsh, which joins over TCP
// to ranks of both hosts.
func TestElasticGrowAcrossHosts(t *testing.T) {
	testmode.SkipIfQuick(t)
	c := newCluster(t, 2)
	_, done := c.grunIn(t, 2*time.Minute, nil, "-H", c.hosts[0]+":2,"+c.hosts[1]+":2", "--rsh", c.rsh(t),
		"--elastic", "2:4", "-x", "GOCOLL_TIMEOUT=30s", filepath.Join(bin, "elastic"), "-kill", "2@40", "-pace", "5ms", "-final-size", "4")
	out, code := done()
	if code != 0 {
		t.Fatalf("grun exited %d, want 0:\n%s", code, out)
	}
	if !regexp.MustCompile(`(?m)^grun: the job finished with 4 ranks, 1 of them replacements; lost rank 2 on host \S+ \(--elastic 2:4\)$`).MatchString(out) {
		t.Fatalf("grun does not say the job finished with 4 ranks, one a replacement of rank 2:\n%s", out)
	}
	done4 := elasticGrown.FindAllStringSubmatch(out, -1)
	if len(done4) != 4 {
		t.Fatalf("%d ranks finished, want 4:\n%s", len(done4), out)
	}
	for _, d := range done4 {
		if d[3] != "4" || d[5] != done4[0][5] {
			t.Errorf("%s %s finished on %s ranks with parameters %s; want 4 ranks and %s", d[1], d[2], d[3], d[5], done4[0][5])
		}
	}
	m := elasticJoin.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the replacement does not say when it took its first step:\n%s", out)
	}
	t.Logf("elastic grow across hosts: %s from the replacement's start to its first step on the grown communicator of 4 ranks", m[1])
	fmt.Printf("elastic grow across hosts: %s from the replacement's start to its first step on the grown communicator of 4 ranks\n", m[1])
	c.checkEmpty(t)
}

var (
	elasticGrown = regexp.MustCompile(`(?m)^elastic: (rank|replacement) (\d+): 150 of 150 steps done on (\d+) ranks after \d+ shrinks(?: and \d+ grows)? in \S+, loss (\S+), params ([0-9a-f]+)$`)
	elasticJoin  = regexp.MustCompile(`(?m)^elastic: replacement \d+: from its start to its first step on 4 ranks: (\S+)$`)
)

// TestElasticJoin starts a job below its maximum, grun -n 2 --elastic 2:4
// --job-file, and grows it to 4 with two grun --join: one on grun's own
// host (another terminal), one on a network-namespace host, both through
// the job file. The running ranks see them in Pending and Grow; the job
// must end with 4 ranks, all with the same parameters, bitwise, the
// joiners' output under their ranks' prefixes, and grun must say that 2
// ranks joined. A fifth rank's grun --join, while 4 live, must be refused:
// status 3 and the reason. The test prints each joiner's time from its
// start to its first step on the grown communicator.
func TestElasticJoin(t *testing.T) {
	testmode.SkipIfQuick(t)
	c := newCluster(t, 1)
	jf := filepath.Join(t.TempDir(), "job")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inNS := func(ns string, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, filepath.Join(bin, "grun")}, args...)...)
		cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "GOCOLL_IFACE=", "GOCOLL_DEBUG=", "GOCOLL_TIMEOUT=30s")
		return cmd
	}
	prog := []string{filepath.Join(bin, "elastic"), "-pace", "20ms", "-final-size", "4"}
	job := inNS(c.launcher, append([]string{"-n", "2", "--elastic", "2:4", "--job-file", jf, "--iface", "br0", "--tag-output"}, prog...)...)
	pr, pw := io.Pipe()
	job.Stdout, job.Stderr = pw, pw
	if err := job.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	lines := make(chan string, 1000)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	jobDone := make(chan error, 1)
	go func() {
		err := job.Wait()
		pw.Close()
		jobDone <- err
	}()
	waitFor := func(what string) {
		t.Helper()
		for l := range lines {
			out.WriteString(l + "\n")
			if strings.Contains(l, what) {
				return
			}
		}
		t.Fatalf("grun never said %q:\n%s", what, out.String())
	}
	for i := 0; ; i++ {
		if _, err := os.Stat(jf); err == nil {
			break
		}
		if i == 500 {
			t.Fatalf("no job file %s after 5s", jf)
		}
		time.Sleep(10 * time.Millisecond)
	}
	type joiner struct {
		cmd *exec.Cmd
		out bytes.Buffer
	}
	join := func(ns string, args ...string) *joiner {
		j := &joiner{cmd: inNS(ns, append([]string{"--join", jf}, args...)...)}
		j.cmd.Stdout, j.cmd.Stderr = &j.out, &j.out
		if err := j.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return j
	}
	here := join(c.launcher, prog...)
	waitFor("rank 2 joined from host")
	there := join(c.ns[c.hosts[0]], prog...)
	waitFor("rank 3 joined from host")
	fifth := join(c.launcher, prog...)
	err := fifth.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 ||
		!strings.Contains(fifth.out.String(), "grun: --join: the job refused this process: the job runs 4 ranks already, the most --elastic 2:4 allows") {
		t.Errorf("a fifth rank's grun --join: %v, want exit status 3 and the refusal:\n%s", err, fifth.out.String())
	}
	for _, j := range []*joiner{here, there} {
		if err := j.cmd.Wait(); err != nil {
			t.Errorf("grun --join: %v:\n%s", err, j.out.String())
		}
	}
	for l := range lines {
		out.WriteString(l + "\n")
	}
	if err := <-jobDone; err != nil {
		t.Fatalf("grun: %v:\n%s", err, out.String())
	}
	all := out.String()
	if want := "grun: the job finished with 4 ranks, 2 of them started by grun --join (--elastic 2:4)\n"; !strings.HasSuffix(all, want) {
		t.Fatalf("grun's last line is not %q:\n%s", want, all)
	}
	for _, r := range []string{"2", "3"} {
		if !strings.Contains(all, "\n["+r+"] elastic: replacement ") {
			t.Errorf("no output of the joiner under its rank's prefix [%s]:\n%s", r, all)
		}
	}
	plain := regexp.MustCompile(`(?m)^\[\d+\] `).ReplaceAllString(all, "")
	done := elasticGrown.FindAllStringSubmatch(plain, -1)
	if len(done) != 4 {
		t.Fatalf("%d ranks finished, want 4:\n%s", len(done), all)
	}
	joined := 0
	for _, d := range done {
		if d[1] == "replacement" {
			joined++
		}
		if d[3] != "4" || d[5] != done[0][5] {
			t.Errorf("%s %s finished on %s ranks with parameters %s; want 4 ranks and %s", d[1], d[2], d[3], d[5], done[0][5])
		}
	}
	if joined != 2 {
		t.Errorf("%d joiners finished, want 2:\n%s", joined, all)
	}
	for _, m := range elasticJoinedAt.FindAllStringSubmatch(all, -1) {
		where := "grun's host"
		if m[1] == "3" {
			where = "a namespace host"
		}
		t.Logf("elastic join from %s: %s from the rank's start to its first step on the grown communicator of %s ranks", where, m[3], m[2])
		fmt.Printf("elastic join from %s: %s from the rank's start to its first step on the grown communicator of %s ranks\n", where, m[3], m[2])
	}
	if _, err := os.Stat(jf); !os.IsNotExist(err) {
		t.Errorf("the job file is left behind (%v)", err)
	}
	c.checkEmpty(t)
}

// elasticJoinedAt is a joiner's line, under its grun rank's prefix.
var elasticJoinedAt = regexp.MustCompile(`(?m)^\[(\d+)\] elastic: replacement \d+: from its start to its first step on (\d+) ranks: (\S+)$`)

//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/logging"
	"github.com/gocoll/gocoll/internal/privfile"
	"github.com/gocoll/gocoll/internal/safetext"
)

// Exit statuses of grun's own making; a failed rank's status is passed on.
const (
	exitInternal = 1   // grun itself could not do its job
	exitUsage    = 2   // bad command line
	exitTimeout  = 124 // --timeout expired (as timeout(1))
	exitNoStart  = 127 // PROG could not be started (as the shell)
)

const (
	// pollInterval is how soon grun first looks again for processes that
	// ranks left behind (nothing tells it when those go away), and
	// maxPollInterval how rarely it ends up looking while they linger.
	pollInterval    = 10 * time.Millisecond
	maxPollInterval = 200 * time.Millisecond
	// killWait is how long processes get to vanish after SIGKILL before
	// grun gives up on them (one stuck in uninterruptible sleep may never).
	killWait = 2 * time.Second
	// drainWait is how long the output may trail behind the last process.
	// Only a process that left the rank's process group while holding its
	// stdout makes EOF take longer than that.
	drainWait = 2 * time.Second
)

// config is a parsed command line.
type config struct {
	n       int
	nSet    bool
	env     []string // from -x, "VAR=val"
	tag     bool
	timeout time.Duration
	grace   time.Duration
	// failWait is how long, after a rank fails, the others have to exit
	// on their own before they are stopped.
	failWait time.Duration
	// elastic is --elastic's MIN: while at least that many ranks live,
	// a failed rank does not stop the others. 0: not elastic.
	elastic int
	// elasticMax is --elastic MIN:MAX's MAX: while fewer ranks live, a
	// failed rank is replaced. 0: none is.
	elasticMax int
	verbose    bool
	prog       string
	args       []string

	// Multi-host jobs. placement is nil when all ranks run here as in
	// the single-host grun (no -H, --hostfile or Slurm allocation).
	hosts     []hostSlots
	placement []placement
	hostsFrom string   // "-H", "--hostfile FILE" or "the Slurm allocation"
	byNode    bool     // --map-by node
	rsh       []string // --rsh, split into words
	iface     string
	ifaceFrom string // "--iface" or "GOCOLL_IFACE"
	outputDir string
	bind      bindMode // --bind-to

	// jobFile is --job-file: where to publish what grun --join needs.
	// joinFile is --join's: this grun joins that job instead of
	// running one (join.go).
	jobFile  string
	joinFile string
}

// job runs one launch of N ranks from start to exit status. It is used by a
// single goroutine; the goroutines it starts talk to it through exits (and
// through out, which locks).
type job struct {
	cfg     config
	starter starter
	out     *output
	environ []string // grun's own environment, the base of every rank's

	hosts []jobHost   // in order of first rank
	where []placement // by rank
	files []*os.File  // --output-dir, by rank

	ranks []*rank
	// originals are the first ranks, fixed once started: the stall
	// reports, on a goroutine of their own, read them while ranks grows
	// with replacements (which the reports leave out).
	originals []*rank
	running   int // ranks started and not yet reaped
	// store is the job's rendezvous; grun tells it of every rank that
	// fails, so that ranks still connecting stop waiting for it.
	store *bootstrap.Server
	// frozen are the ranks found stopped when the first failure came
	// (see stoppedRanks).
	frozen []*rank
	// quits delivers SIGQUIT, which asks for a stall report (stall.go).
	quits <-chan os.Signal

	// lost are the ranks an elastic job went on without, in order;
	// replaced how many replacements were started (--elastic MIN:MAX).
	lost     []*rank
	replaced int
	// What a replacement is started with: each host's GRUN_ADDR, the
	// token.
	addrs map[string]string
	token string

	// With --job-file: joining gruns the join port admitted (join.go),
	// handed to the supervisor; how many it took; what the file says.
	joins   chan *joinRequest
	joined  int
	jobFile jobFile

	// Filled by the goroutines the job starts: the per-rank waiters, and
	// the forwarders when whoever reads grun's output went away (as in
	// "grun ... | head"), which stops the job as SIGPIPE would.
	exits      chan exitEvent
	brokenPipe chan struct{}
	streams    sync.WaitGroup // the forwarders
	readers    []io.Closer    // what they read; closed if EOF never comes

	// Set when the job starts to end early; the first cause decides the
	// message and the exit status, later ones only hurry things along.
	cause    *cause
	stopping bool
	stopSig  syscall.Signal // what beginStop sent the ranks
	grace    *time.Timer
	killed   bool
	// rekill repeats SIGKILL once, for remote ranks: the first only asks
	// the remote side (see rshKillDelay), the second also ends rsh.
	rekill *time.Timer

	// A rank failure not yet acted on: the others have until failWait
	// fires to exit on their own.
	pending  *cause
	failWait *time.Timer
	// len(failures) when the stop began: failures after that were ranks
	// ending on their own, not ranks grun stopped.
	failuresAtStop int

	// Ranks that failed on their own (not of a signal grun sent) within
	// settleWindow of the first failure, in the order they were reaped.
	// Reap order is not death order: a rank that loses a peer can exit
	// before the dead peer's exit has been reaped, so report picks among
	// these rather than trusting the first.
	failures  []*rank
	settleEnd time.Time
}

// settleWindow is how long after the first failure other ranks' failures
// still count as candidates for "the rank that failed first".
const settleWindow = 250 * time.Millisecond

type rank struct {
	id int // the rank it runs as (a replacement: the rank it replaces)
	// idx is its place in job.ranks; replacement says it replaces a
	// rank that failed.
	idx         int
	replacement bool
	joined      bool   // started by grun --join (join.go)
	host        string // "" when the job has no host list
	remote      bool
	proc        process
	done        bool
	status      exitStatus
	reapedAt    time.Time
}

// name is how messages refer to the rank: "rank 3", or "rank 3 on host h2"
// in a multi-host job.
func (r *rank) name() string {
	n := "rank " + strconv.Itoa(r.id)
	if r.replacement {
		n = "the replacement of rank " + strconv.Itoa(r.id)
	}
	if r.host == "" {
		return n
	}
	return n + " on host " + r.host
}

// pidNote is the pid in the message, saying whose it is for remote ranks.
func (r *rank) pidNote() string {
	if r.joined {
		return "grun --join, pid " + strconv.Itoa(r.proc.pid())
	}
	if r.remote {
		return "rsh pid " + strconv.Itoa(r.proc.pid())
	}
	return "pid " + strconv.Itoa(r.proc.pid())
}

type exitEvent struct {
	rank   int
	status exitStatus
	at     time.Time // when the rank was reaped
}

type causeKind int

const (
	rankFailed causeKind = iota
	gotSignal
	timedOut
	canceled
	startFailed
)

// cause is why the job is being stopped.
type cause struct {
	kind   causeKind
	rank   *rank          // rankFailed
	signal syscall.Signal // gotSignal
	err    error          // startFailed, canceled
	others int            // ranks still running when the stop began
}

func newJob(cfg config, st starter, stdout, stderr io.Writer, environ []string) *job {
	return &job{
		cfg:        cfg,
		starter:    st,
		out:        &output{stdout: stdout, stderr: stderr},
		environ:    environ,
		exits:      make(chan exitEvent, cfg.n),
		brokenPipe: make(chan struct{}, 1),
		joins:      make(chan *joinRequest),
	}
}

// run starts the ranks, supervises them until every one has exited, and
// returns grun's exit status. sigs delivers the signals grun is asked to
// pass on (SIGINT, SIGTERM, SIGHUP); cancelling ctx stops the job as
// SIGTERM would.
func (j *job) run(ctx context.Context, sigs <-chan os.Signal) int {
	token, err := newToken()
	if err != nil {
		j.out.say("cannot make a job token: %v", err)
		return exitInternal
	}
	j.plan()
	cpus, err := j.bindCPUs()
	if err != nil {
		j.out.say("%v", err)
		return exitUsage
	}
	var remote []string
	for _, h := range j.hosts {
		if h.remote {
			remote = append(remote, h.name)
		}
	}
	iface := j.cfg.iface
	if len(remote) == 0 && j.cfg.jobFile == "" {
		// Only joiners from elsewhere need more than loopback.
		iface = ""
	}
	listen, dial, how, err := storeAddrs(ctx, remote, iface, j.cfg.ifaceFrom)
	if err != nil {
		j.out.say("%v", err)
		return exitInternal
	}
	// The ranks get the hex text and bootstrap.FromEnv uses those very
	// bytes as the key, so the store must be given the text too.
	store, err := bootstrap.Listen(listen, []byte(token))
	if err != nil {
		j.out.say("cannot start the rendezvous store on %s: %v", listen, err)
		return exitInternal
	}
	_, port, _ := net.SplitHostPort(store.Addr())
	addrs := make(map[string]string) // host name -> GRUN_ADDR
	for _, h := range j.hosts {
		ip, ok := dial[h.name]
		if !ok && len(remote) > 0 {
			ip = dial[remote[0]]
		}
		if ip == "" {
			addrs[h.name] = store.Addr()
		} else {
			addrs[h.name] = net.JoinHostPort(ip, port)
		}
	}
	log := j.logger()
	for _, h := range j.hosts {
		name := h.name
		if name == "" {
			name = "localhost"
		}
		log.Info("grun: rendezvous address", "host", name, "remote", h.remote, "dial", addrs[h.name], "listen", store.Addr(), "chosen_by", how)
	}
	if j.cfg.verbose {
		j.out.say("rendezvous store at %s; starting %s of %s", store.Addr(), plural(j.cfg.n, "rank"), j.cfg.prog)
		if j.cfg.placement != nil {
			for _, h := range j.hosts {
				where := "here"
				if h.remote {
					where = "through " + strings.Join(j.cfg.rsh, " ")
				}
				j.out.say("host %s (%s): %s, %s, store at %s", h.name, j.cfg.hostsFrom, plural(h.ranks, "rank"), where, addrs[h.name])
			}
		}
	}
	if err := j.openOutputFiles(); err != nil {
		store.Close()
		j.out.say("%v", err)
		return exitInternal
	}
	defer j.closeOutputFiles()

	j.store = store
	j.token = token
	over := make(chan struct{})
	if j.cfg.jobFile != "" {
		ln, err := j.listenJoins(listen, addrs)
		if err != nil {
			store.Close()
			j.out.say("%v", err)
			return exitInternal
		}
		defer os.Remove(j.cfg.jobFile)
		defer ln.Close()
		go j.serveJoins(ln, store, token, over)
	}
	j.startRanks(addrs, token, cpus)
	stopStalls := make(chan struct{})
	stallsDone := make(chan struct{})
	go func() {
		defer close(stallsDone)
		j.watchStalls(j.quits, stopStalls)
	}()
	j.supervise(ctx, sigs)
	close(over)
	j.sweep(sigs)
	close(stopStalls)
	<-stallsDone
	j.drain()
	store.Close()

	code := j.report()
	if n := store.Refused(); n > 0 {
		j.out.say("the rendezvous store refused %s (wrong token, or not a gocoll client)", plural(n, "connection"))
	}
	return code
}

// logger is grun's GOCOLL_DEBUG logger, at the level the library would use
// with the job's environment, but writing through out, so that its lines
// never land in the middle of a rank's.
func (j *job) logger() *slog.Logger {
	var level string
	for _, kv := range j.environ {
		if v, ok := strings.CutPrefix(kv, "GOCOLL_DEBUG="); ok {
			level = v
		}
	}
	h := logging.New(level).Handler()
	lv := slog.LevelWarn
	switch ctx := context.Background(); {
	case h.Enabled(ctx, slog.LevelDebug):
		lv = slog.LevelDebug
	case h.Enabled(ctx, slog.LevelInfo):
		lv = slog.LevelInfo
	case !h.Enabled(ctx, slog.LevelError):
		lv = slog.LevelError + 4
	}
	return slog.New(slog.NewTextHandler(stderrWriter{j.out}, &slog.HandlerOptions{Level: lv})).With("lib", "gocoll")
}

// stderrWriter passes each write, which slog makes one whole record, to
// grun's stderr under the output lock.
type stderrWriter struct{ o *output }

func (w stderrWriter) Write(p []byte) (int, error) {
	if err := w.o.write(w.o.stderr, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func newToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// jobHost is a host of the job as placed.
type jobHost struct {
	name   string
	remote bool
	ranks  int
}

// plan fills j.hosts and j.where from the placement: without a host list
// every rank is local, rank = local rank, as before hosts existed.
func (j *job) plan() {
	j.where = make([]placement, j.cfg.n)
	if j.cfg.placement == nil {
		j.hosts = []jobHost{{name: "", ranks: j.cfg.n}}
		for i := range j.where {
			j.where[i] = placement{localRank: i, localSize: j.cfg.n}
		}
		return
	}
	copy(j.where, j.cfg.placement)
	self := hostname()
	seen := make(map[string]int)
	for _, p := range j.where {
		k, ok := seen[p.host]
		if !ok {
			k = len(j.hosts)
			seen[p.host] = k
			j.hosts = append(j.hosts, jobHost{name: p.host, remote: !isLocalHost(p.host, self)})
		}
		j.hosts[k].ranks++
	}
}

func (j *job) hostOf(i int) jobHost {
	for _, h := range j.hosts {
		if h.name == j.where[i].host {
			return h
		}
	}
	return jobHost{}
}

// rankEnv is grun's environment, then exports; exec keeps the last of
// duplicate names, so a GRUN_* inherited from an enclosing job cannot leak
// through.
func (j *job) rankEnv(exports []string, token string) []string {
	env := make([]string, 0, len(j.environ)+len(exports)+1)
	env = append(env, j.environ...)
	env = append(env, exports...)
	return append(env, "GRUN_TOKEN="+token)
}

// rankExports are the -x variables and the job's GRUN_* but the token:
// what a remote rank's command line carries.
func (j *job) rankExports(i int, addr string) []string {
	env := make([]string, 0, len(j.cfg.env)+5)
	env = append(env, j.cfg.env...)
	if j.cfg.elastic > 0 {
		env = append(env, "GOCOLL_ELASTIC=1")
	}
	return append(env,
		"GRUN_RANK="+strconv.Itoa(i),
		"GRUN_SIZE="+strconv.Itoa(j.cfg.n),
		"GRUN_LOCAL_RANK="+strconv.Itoa(j.where[i].localRank),
		"GRUN_LOCAL_SIZE="+strconv.Itoa(j.where[i].localSize),
		"GRUN_ADDR="+addr,
	)
}

// bindCPUs is the CPU of each rank started here, in rank order, or nil
// when they are not bound (see bindPlan).
func (j *job) bindCPUs() ([]int, error) {
	local := 0
	for _, h := range j.hosts {
		if !h.remote {
			local += h.ranks
		}
	}
	if j.cfg.bind == bindNone || local == 0 {
		return nil, nil
	}
	cpus, err := allowedCPUs()
	if err != nil {
		if j.cfg.bind == bindCore {
			return nil, fmt.Errorf("--bind-to core: %w", err)
		}
		return nil, nil
	}
	return bindPlan(j.cfg.bind, local, cpus)
}

func (j *job) startRanks(addrs map[string]string, token string, cpus []int) {
	j.addrs, j.token = addrs, token
	for i := 0; i < j.cfg.n; i++ {
		cpu := -1
		if !j.hostOf(i).remote && len(cpus) > 0 {
			cpu = cpus[0]
			cpus = cpus[1:]
		}
		if err := j.startRank(i, false, cpu); err != nil {
			j.beginStop(&cause{kind: startFailed, err: err}, syscall.SIGTERM)
			break
		}
	}
	j.originals = slices.Clip(j.ranks)
}

// startRank starts a process as rank i, bound to cpu unless it is -1;
// replacement says it replaces rank i, which failed.
func (j *job) startRank(i int, replacement bool, cpu int) error {
	dir, err := os.Getwd()
	if err != nil {
		dir = "."
	}
	h := j.hostOf(i)
	exports := j.rankExports(i, j.addrs[h.name])
	spec := rankSpec{
		rank: i,
		prog: j.cfg.prog,
		args: j.cfg.args,
		env:  j.rankEnv(exports, j.token),
	}
	if h.remote {
		spec.remote, spec.host, spec.dir, spec.exports, spec.token = true, h.name, dir, exports, j.token
	} else if cpu >= 0 {
		spec.bound, spec.cpu = true, cpu
	}
	idx := len(j.ranks)
	r := &rank{id: i, idx: idx, replacement: replacement, host: h.name, remote: h.remote}
	proc, err := j.starter.start(spec)
	if err != nil {
		return fmt.Errorf("cannot start %s: %w", r.name(), err)
	}
	r.proc = proc
	if j.cfg.verbose {
		if spec.bound {
			j.out.say("%s: %s, bound to CPU %d", r.name(), r.pidNote(), spec.cpu)
		} else {
			j.out.say("%s: %s", r.name(), r.pidNote())
		}
	}
	j.adopt(r, proc)
	return nil
}

// adopt counts r, whose process runs, among the job's ranks: its output
// is forwarded and its exit reported to the supervisor.
func (j *job) adopt(r *rank, proc process) {
	idx, i := len(j.ranks), r.id
	j.ranks = append(j.ranks, r)
	j.running++
	stdout, stderr := proc.output()
	var prefix []byte
	outW, errW := j.out.stdout, j.out.stderr
	if j.files != nil {
		if f := j.outputFile(i); f != nil {
			outW, errW = f, f
		}
	} else if j.cfg.tag {
		prefix = []byte("[" + strconv.Itoa(i) + "] ")
	}
	j.forward(stdout, prefix, outW)
	j.forward(stderr, prefix, errW)
	go func() {
		st := proc.wait()
		// Timed here, not when supervise gets to it: this goroutine
		// may lose the CPU before its send, long enough for a peer
		// that saw this rank vanish to exit and be reaped first.
		j.exits <- exitEvent{rank: idx, status: st, at: time.Now()}
	}()
}

// replace starts a replacement for r, which failed, if the job is
// elastic up to a MAX (--elastic MIN:MAX), fewer than MAX ranks live,
// and the job has replacements left (MAX over its life). The
// replacement joins the running job (comm's Grow).
func (j *job) replace(r *rank) {
	if j.cfg.elasticMax <= 0 || j.stopping || j.running >= j.cfg.elasticMax {
		return
	}
	if r.joined {
		// Its host is grun --join's, which grun cannot start anything on.
		j.out.say("not replacing %s: it joined with grun --join; another grun --join may take its place", r.name())
		return
	}
	if j.replaced >= j.cfg.elasticMax {
		j.out.say("not replacing %s: %d replacements started already (--elastic %s)", r.name(), j.replaced, j.elasticFlag())
		return
	}
	j.replaced++
	if err := j.startRank(r.id, true, -1); err != nil {
		j.out.say("%v; the job goes on without it", err)
		return
	}
	j.out.say("started a replacement of rank %d (%s), which joins the running job (--elastic %s)",
		r.id, j.ranks[len(j.ranks)-1].pidNote(), j.elasticFlag())
}

// openOutputFiles creates --output-dir and one file per rank in it,
// rank-R.log, which gets that rank's stdout and stderr lines.
func (j *job) openOutputFiles() error {
	if j.cfg.outputDir == "" {
		return nil
	}
	if err := os.MkdirAll(j.cfg.outputDir, 0o755); err != nil {
		return fmt.Errorf("--output-dir: %w", err)
	}
	j.files = make([]*os.File, j.cfg.n)
	for i := range j.files {
		f, err := createRankLog(j.cfg.outputDir, i)
		if err != nil {
			j.closeOutputFiles()
			return fmt.Errorf("--output-dir: %w", err)
		}
		j.files[i] = f
	}
	return nil
}

// createRankLog creates rank i's file in --output-dir, rank-R.log, mode
// 0600 and never through a symlink planted at its name (internal/privfile):
// a rank's output may hold what other users must not read.
func createRankLog(dir string, i int) (*os.File, error) {
	return privfile.Create(filepath.Join(dir, "rank-"+strconv.Itoa(i)+".log"))
}

// outputFile is rank i's --output-dir file, created for a rank that
// joined after the start; nil if it cannot be.
func (j *job) outputFile(i int) *os.File {
	for len(j.files) <= i {
		j.files = append(j.files, nil)
	}
	if j.files[i] == nil {
		f, err := createRankLog(j.cfg.outputDir, i)
		if err != nil {
			j.out.say("--output-dir: %v; its output goes to grun's", err)
			return nil
		}
		j.files[i] = f
	}
	return j.files[i]
}

func (j *job) closeOutputFiles() {
	for _, f := range j.files {
		if f != nil {
			if err := f.Close(); err != nil {
				j.out.say("--output-dir: %v", err)
			}
		}
	}
}

func (j *job) forward(src io.ReadCloser, prefix []byte, dst io.Writer) {
	j.readers = append(j.readers, src)
	j.streams.Add(1)
	go func() {
		defer j.streams.Done()
		forwardLines(src, prefix, func(p []byte) {
			// Other write errors are ignored: forwarding must go on, or
			// the rank blocks on a full pipe and hangs the job.
			if err := j.out.write(dst, p); errors.Is(err, syscall.EPIPE) {
				select {
				case j.brokenPipe <- struct{}{}:
				default:
				}
			}
		})
	}()
}

// supervise waits for every rank to exit, stopping them all as soon as one
// fails, a signal arrives, the timeout expires or ctx is cancelled.
func (j *job) supervise(ctx context.Context, sigs <-chan os.Signal) {
	var timeout <-chan time.Time
	if j.cfg.timeout > 0 {
		t := time.NewTimer(j.cfg.timeout)
		defer t.Stop()
		timeout = t.C
	}
	done := ctx.Done()
	for j.running > 0 {
		select {
		case ev := <-j.exits:
			r := j.ranks[ev.rank]
			r.done, r.status, r.reapedAt = true, ev.status, ev.at
			j.running--
			if j.cfg.verbose {
				j.out.say("%s (%s) %v", r.name(), r.pidNote(), r.status)
			}
			if r.status.failed() {
				if j.store != nil && !r.replacement && !r.joined {
					// A replacement joins under a job rank of its
					// own, whose connection tells the store.
					j.store.MarkGone(r.id, r.status.String())
				}
				if j.goesOn(r) {
					j.replace(r)
					continue
				}
				j.noteFailure(r)
				j.rankFailed(r)
			}
		case req := <-j.joins:
			j.admit(req)
		case s := <-sigs:
			sig, _ := s.(syscall.Signal)
			if sig == 0 {
				sig = syscall.SIGTERM
			}
			if j.stopping {
				// A second Ctrl-C, or one while a failure is being
				// handled, means now: no more grace.
				if !j.killed {
					j.kill("on " + signalName(sig))
				}
				continue
			}
			j.beginStop(j.orPending(&cause{kind: gotSignal, signal: sig}), sig)
		case <-j.failWaitC():
			j.beginStop(j.pending, syscall.SIGTERM)
		case <-j.brokenPipe:
			// Ranks are Go programs as often as not, and those ignore a
			// SIGPIPE that does not come from their own write.
			j.beginStop(j.orPending(&cause{kind: gotSignal, signal: syscall.SIGPIPE}), syscall.SIGTERM)
		case <-timeout:
			timeout = nil
			j.beginStop(j.orPending(&cause{kind: timedOut}), syscall.SIGTERM)
		case <-done:
			done = nil
			j.beginStop(j.orPending(&cause{kind: canceled, err: context.Cause(ctx)}), syscall.SIGTERM)
		case <-j.graceC():
			j.kill(fmt.Sprintf("still running after --grace %v", j.cfg.grace))
		case <-j.rekillC():
			j.rekill = nil
			for _, r := range j.ranks {
				r.proc.signal(syscall.SIGKILL)
			}
		}
	}
	if j.cause == nil && j.pending != nil {
		// Every rank ended on its own within --fail-wait.
		j.failWait.Stop()
		j.cause = j.pending
		j.failuresAtStop = len(j.failures)
	}
}

// goesOn reports whether an elastic job goes on without r, which failed:
// while at least --elastic ranks live (and none has yet failed the job).
// It says so, and counts r as lost.
func (j *job) goesOn(r *rank) bool {
	if j.cfg.elastic <= 0 || j.cause != nil || j.pending != nil {
		return false
	}
	live := j.running
	if live < j.cfg.elastic {
		j.out.say("%s left after %s failed, fewer than --elastic %d: stopping the job", plural(live, "rank"), r.name(), j.cfg.elastic)
		return false
	}
	j.lost = append(j.lost, r)
	j.out.say("%s (%s) %v; the job goes on with %s (--elastic %s)", r.name(), r.pidNote(), r.status, plural(live, "rank"), j.elasticFlag())
	return true
}

// elasticFlag is --elastic's value as given: "MIN" or "MIN:MAX".
func (j *job) elasticFlag() string {
	if j.cfg.elasticMax > 0 {
		return fmt.Sprintf("%d:%d", j.cfg.elastic, j.cfg.elasticMax)
	}
	return strconv.Itoa(j.cfg.elastic)
}

// rankFailed starts the end of the job on r's failure: at once without
// --fail-wait, else once the others have had failWait to exit on their own.
func (j *job) rankFailed(r *rank) {
	if j.cause != nil || j.pending != nil {
		return
	}
	c := &cause{kind: rankFailed, rank: r}
	if j.cfg.failWait <= 0 {
		j.beginStop(c, syscall.SIGTERM)
		return
	}
	j.pending = c
	j.failWait = time.NewTimer(j.cfg.failWait)
}

// orPending is the cause a stop is reported under: a rank failure that came
// first, else c.
func (j *job) orPending(c *cause) *cause {
	if j.pending != nil {
		return j.pending
	}
	return c
}

func (j *job) failWaitC() <-chan time.Time {
	if j.failWait == nil || j.cause != nil {
		return nil
	}
	return j.failWait.C
}

// noteFailure records r as a candidate for the failure that ended the job,
// unless it died of the signal grun sent to stop the job or came too late.
func (j *job) noteFailure(r *rank) {
	now := time.Now()
	if len(j.failures) == 0 {
		j.settleEnd = now.Add(settleWindow)
	} else if now.After(j.settleEnd) {
		return
	}
	if j.stopping && (r.status.signaled && (r.status.signal == j.stopSig || r.status.signal == syscall.SIGKILL && j.killed)) {
		return
	}
	if len(j.failures) == 0 {
		j.frozen = j.stoppedRanks()
	}
	j.failures = append(j.failures, r)
}

// stoppedRanks lists the local ranks still running whose process is
// stopped (SIGSTOP, a debugger) as the first failure comes in: its peers
// most likely timed out waiting for one of them.
func (j *job) stoppedRanks() []*rank {
	var rs []*rank
	for _, r := range j.ranks {
		if !r.done && !r.remote && r.proc != nil && procState(r.proc.pid()) == 'T' {
			rs = append(rs, r)
		}
	}
	return rs
}

// culprit picks, among the candidate failures, the rank to blame: one that
// was killed by a signal grun did not send (SIGKILL from the OOM killer, a
// SIGSEGV) says more than an exit status, which is what ranks that merely
// lost a peer report; otherwise the first reaped, by the time its waiter
// saw it go.
func (j *job) culprit() *rank {
	for _, r := range j.failures {
		if r.status.signaled {
			return r
		}
	}
	first := j.failures[0]
	for _, r := range j.failures[1:] {
		if r.reapedAt.Before(first.reapedAt) {
			first = r
		}
	}
	return first
}

// quitter is a rank that exited 0 before first failed, but without
// closing its communicator (the store saw its connection end without a
// goodbye): to its peers it died, and their failures followed. Nil if
// there is none.
func (j *job) quitter(first *rank) *rank {
	if j.store == nil {
		return nil
	}
	for _, r := range j.ranks {
		// Reaped before the first failure, or, since a peer that reads
		// its connection's end can exit before grun reaps the quitter,
		// the first the store saw leave.
		if r.done && !r.status.failed() && (j.store.LeftFirst(r.id) || !r.reapedAt.After(first.reapedAt) && j.store.LeftWithoutGoodbye(r.id)) {
			return r
		}
	}
	return nil
}

// closedEarly is a rank other than first that said, as it closed its
// communicator, that other ranks went on to a call it never made
// (bootstrap.ClosedEarlyPrefix), and what it said without its rank; nil
// if there is none.
func (j *job) closedEarly(first *rank) (*rank, string) {
	if j.store == nil {
		return nil, ""
	}
	for k, v := range j.store.Entries(bootstrap.ClosedEarlyPrefix) {
		id, err := strconv.Atoi(strings.TrimPrefix(k, bootstrap.ClosedEarlyPrefix))
		if err != nil || id < 0 || id >= len(j.ranks) || j.ranks[id] == first {
			continue
		}
		r := j.ranks[id]
		return r, strings.TrimPrefix(safetext.Printable(v), "rank "+strconv.Itoa(id)+" ")
	}
	return nil, ""
}

// beginStop records why the job ends and signals every rank's group. Only
// the first cause counts; a stop already under way carries on as it is.
func (j *job) beginStop(c *cause, sig syscall.Signal) {
	if j.cause != nil {
		return
	}
	c.others = j.running
	j.cause = c
	j.failuresAtStop = len(j.failures)
	if j.failWait != nil {
		j.failWait.Stop()
	}
	j.stopping = true
	j.stopSig = sig
	// Ranks that already exited are signalled too: their groups may hold
	// processes they left behind.
	for _, r := range j.ranks {
		r.proc.signal(sig)
	}
	j.grace = time.NewTimer(j.cfg.grace)
}

func (j *job) graceC() <-chan time.Time {
	if j.grace == nil || j.killed {
		return nil
	}
	return j.grace.C
}

// kill sends SIGKILL to every group; why says why, for the message.
func (j *job) rekillC() <-chan time.Time {
	if j.rekill == nil {
		return nil
	}
	return j.rekill.C
}

func (j *job) kill(why string) {
	j.killed = true
	j.rekill = time.NewTimer(rshKillDelay + pollInterval)
	if j.grace != nil {
		j.grace.Stop()
	}
	var alive []string
	for _, r := range j.ranks {
		if !r.done {
			alive = append(alive, strconv.Itoa(r.id))
		}
		r.proc.signal(syscall.SIGKILL)
	}
	if len(alive) > 0 {
		j.out.say("sent SIGKILL to %s %s: %s", plural(len(alive), "rank"), why, strings.Join(alive, ", "))
	}
}

// sweep stops whatever the ranks left behind in their process groups (a
// background child of a rank that exited 0, say), so that grun never
// returns with part of the job still running. They get the same SIGTERM,
// --grace, SIGKILL sequence as ranks.
func (j *job) sweep(sigs <-chan os.Signal) {
	left := func() (n int) {
		for _, r := range j.ranks {
			if r.proc.running() {
				n++
			}
		}
		return n
	}
	if left() == 0 {
		return
	}
	if !j.stopping {
		if j.cfg.verbose {
			j.out.say("stopping processes the ranks left behind")
		}
		j.stopping = true
		for _, r := range j.ranks {
			r.proc.signal(syscall.SIGTERM)
		}
		j.grace = time.NewTimer(j.cfg.grace)
	}
	poll := time.NewTimer(pollInterval)
	defer poll.Stop()
	interval := pollInterval
	var giveUp <-chan time.Time
	for left() > 0 {
		if j.killed && giveUp == nil {
			giveUp = time.After(killWait)
		}
		select {
		case <-poll.C:
			interval = min(2*interval, maxPollInterval)
			poll.Reset(interval)
			if j.killed {
				// Something may have forked after the first SIGKILL.
				for _, r := range j.ranks {
					r.proc.signal(syscall.SIGKILL)
				}
			}
		case <-j.graceC():
			j.kill("")
		case <-sigs:
			if !j.killed {
				j.kill("")
			}
		case <-giveUp:
			j.out.say("some processes started by the ranks did not exit after SIGKILL; giving up on them")
			return
		}
	}
}

// drain waits for the last output. The pipes reach EOF once every process
// holding them is gone, which sweep has seen to unless one escaped its
// process group.
func (j *job) drain() {
	done := make(chan struct{})
	go func() {
		j.streams.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-time.After(drainWait):
	}
	for _, r := range j.readers {
		r.Close()
	}
	<-done
}

// report prints how the job ended, once all output is through so that the
// message comes last, and returns grun's exit status.
func (j *job) report() int {
	c := j.cause
	if c == nil {
		if j.joined > 0 {
			var names []string
			for _, r := range j.lost {
				names = append(names, r.name())
			}
			msg := fmt.Sprintf("the job finished with %d ranks", len(j.ranks)-len(j.lost))
			if j.replaced > 0 {
				msg += fmt.Sprintf(", %d of them replacements, %d started by grun --join", j.replaced, j.joined)
			} else {
				msg += fmt.Sprintf(", %d of them started by grun --join", j.joined)
			}
			if len(names) > 0 {
				msg += "; lost " + strings.Join(names, ", ")
			}
			j.out.say("%s (--elastic %s)", msg, j.elasticFlag())
			return 0
		}
		if len(j.lost) > 0 {
			var names []string
			for _, r := range j.lost {
				names = append(names, r.name())
			}
			if j.replaced > 0 {
				j.out.say("the job finished with %d ranks, %d of them replacements; lost %s (--elastic %s)",
					len(j.ranks)-len(j.lost), j.replaced, strings.Join(names, ", "), j.elasticFlag())
				return 0
			}
			j.out.say("the job finished with %d of %d ranks; lost %s (--elastic %d)",
				len(j.ranks)-len(j.lost), len(j.ranks), strings.Join(names, ", "), j.cfg.elastic)
		}
		return 0
	}
	switch c.kind {
	case rankFailed:
		first := j.culprit()
		msg := fmt.Sprintf("%s (%s) %v", first.name(), first.pidNote(), first.status)
		if q, why := j.closedEarly(first); q != nil {
			// It closed its communicator while the others went on to a
			// later call, which it never made: their failures followed.
			msg = fmt.Sprintf("%s (%s) %s; then %s", q.name(), q.pidNote(), why, msg)
		} else if q := j.quitter(first); q != nil {
			// Its peers failed because it left without a goodbye: it,
			// not the first of them, is the cause.
			msg = fmt.Sprintf("%s (%s) exited 0 without closing its communicator, so its peers lost it; then %s", q.name(), q.pidNote(), msg)
		} else if len(j.frozen) > 0 {
			// Stopped while the others waited for it: they timed out.
			var names []string
			for _, r := range j.frozen {
				names = append(names, fmt.Sprintf("%s (%s)", r.name(), r.pidNote()))
			}
			msg = fmt.Sprintf("%s stopped (SIGSTOP, or a debugger) while the others waited; then %s", strings.Join(names, ", "), msg)
		}
		var also []string
		for _, r := range j.failures {
			if r != first {
				also = append(also, fmt.Sprintf("%s %v", r.name(), r.status))
			}
		}
		if len(also) > 0 {
			msg += "; at about the same time " + strings.Join(also, ", ")
		}
		// c.others counted every rank still running when grun began to
		// stop them, the ones that then failed on their own among them.
		if stopped := c.others - (len(j.failures) - j.failuresAtStop); stopped > 0 {
			msg += fmt.Sprintf("; stopped the other %s", plural(stopped, "rank"))
		}
		j.out.say("%s", msg)
		return first.status.exitCode()
	case gotSignal:
		j.out.say("got %s; stopped %s", signalName(c.signal), plural(c.others, "rank"))
		return 128 + int(c.signal)
	case timedOut:
		j.out.say("job exceeded --timeout %v; stopped %s", j.cfg.timeout, plural(c.others, "rank"))
		return exitTimeout
	case canceled:
		j.out.say("%v; stopped %s", c.err, plural(c.others, "rank"))
		return 128 + int(syscall.SIGTERM)
	case startFailed:
		msg := c.err.Error()
		if c.others > 0 {
			msg += fmt.Sprintf("; stopped the %s already started", plural(c.others, "rank"))
		}
		j.out.say("%s", msg)
		return exitNoStart
	}
	return exitInternal
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

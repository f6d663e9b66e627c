//go:build unix

package main

// Ranks that join a running elastic job from elsewhere.
//
// A grun started with --elastic MIN:MAX --job-file FILE listens on a
// second port beside its rendezvous store, the join port, and writes
// FILE (mode 0600: it holds the job's token) with that port's address,
// the store's and the token. "grun --join FILE PROG ARGS", run on any
// host that reaches those addresses, asks the job's grun for a seat. The
// job's grun refuses it while MAX ranks live (or the job is ending), else
// gives it a rank number and the environment of a rank (GRUN_*, -x,
// GOCOLL_ELASTIC=1); the joining grun starts PROG with it, and PROG's
// Init joins the running job as a replacement does (comm's Grow). The
// joining grun relays PROG's output and exit status to the job's grun,
// which prints and counts them as any rank's, and relays the job's
// grun's signals back: the connection is the rank's lifeline, as rsh's
// stdin is a remote rank's.
//
// Frames on the join connection, after auth's handshake (service Join):
// a little-endian uint32 length of what follows, a type byte, a payload.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/auth"
	"github.com/gocoll/gocoll/internal/gate"
	"github.com/gocoll/gocoll/internal/logging"
	"github.com/gocoll/gocoll/internal/privfile"
)

const (
	frameHello  = 'J' // joiner -> job: its host name
	frameAdmit  = 'A' // job -> joiner: rank, NUL, then NUL-separated VAR=val
	frameRefuse = 'R' // job -> joiner: why not
	framePid    = 'P' // joiner -> job: PROG's pid, in decimal
	frameStdout = 'O' // joiner -> job: bytes of PROG's stdout
	frameStderr = 'E' // joiner -> job: bytes of PROG's stderr
	frameExit   = 'X' // joiner -> job: "code N" or "signal N"
	frameSignal = 'S' // job -> joiner: a signal number for PROG's group

	maxJoinFrame = 1 << 20
	// exitRefused is grun --join's status when the job will not take it.
	exitRefused = 3
)

func writeJoinFrame(w io.Writer, typ byte, payload []byte) error {
	buf := make([]byte, 5, 5+len(payload))
	binary.LittleEndian.PutUint32(buf, uint32(1+len(payload)))
	buf[4] = typ
	_, err := w.Write(append(buf, payload...))
	return err
}

func readJoinFrame(r io.Reader) (byte, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n < 1 || n > maxJoinFrame {
		return 0, nil, fmt.Errorf("join frame of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, nil, err
	}
	return b[0], b[1:], nil
}

// admittedEnv sorts the variables a job's grun sent with its admission,
// each NAME=VALUE: it takes GRUN_* (but the token: the joiner's own, from
// its job file, is the one that counts) and GOCOLL_*, and leaves the rest
// (dropped, by name). Knowing the job's token must not be enough to run
// code on the joining host, and almost any other variable can make a
// program load or run code (LD_PRELOAD, PATH, GOFLAGS, PYTHONPATH,
// BASH_ENV, ...): what else the joining rank needs, the user who runs
// grun --join gives with its own -x. A malformed entry is an error.
func admittedEnv(kvs []string) (taken, dropped []string, err error) {
	for _, kv := range kvs {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.ContainsAny(name, " \t\n") {
			return nil, nil, fmt.Errorf("sent %q, not NAME=VALUE", kv)
		}
		if strings.HasPrefix(name, "GRUN_") && name != "GRUN_TOKEN" || strings.HasPrefix(name, "GOCOLL_") {
			taken = append(taken, kv)
		} else {
			dropped = append(dropped, name)
		}
	}
	return taken, dropped, nil
}

// jobFile is what --job-file holds.
type jobFile struct {
	join, store, token string
}

func (f jobFile) text() string {
	return "# grun job file: \"grun --join THIS-FILE PROG [ARGS...]\" adds a rank to the running job.\n" +
		"# It holds the job's secret token: keep it private (mode 0600).\n" +
		"join " + f.join + "\nstore " + f.store + "\ntoken " + f.token + "\n"
}

// writeJobFile writes f to path with mode 0600, all at once (a joiner
// never reads half a file). Something at path other than a regular file of
// this user, a planted symlink say, is refused (privfile.ErrUnsafe); the
// rename would replace a symlink planted later, never write through it.
func writeJobFile(path string, f jobFile) error {
	if err := privfile.Check(path); err != nil {
		return fmt.Errorf("--job-file: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".grun-job-*")
	if err != nil {
		return fmt.Errorf("--job-file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("--job-file: %w", err)
	}
	if _, err := tmp.WriteString(f.text()); err != nil {
		tmp.Close()
		return fmt.Errorf("--job-file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("--job-file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("--job-file: %w", err)
	}
	return nil
}

func readJobFile(path string) (jobFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return jobFile{}, err
	}
	var f jobFile
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch k {
		case "join":
			f.join = v
		case "store":
			f.store = v
		case "token":
			f.token = v
		}
	}
	if f.join == "" || f.store == "" || f.token == "" {
		return jobFile{}, fmt.Errorf("%s is not a grun job file (want join, store and token lines)", path)
	}
	return f, nil
}

// joinRequest is a joining grun that proved the token, waiting for the
// supervisor's answer.
type joinRequest struct {
	conn net.Conn
	r    *bufio.Reader
	host string
	done chan struct{} // closed once the supervisor has answered
}

// serveJoins accepts joining gruns on ln until it is closed, and hands
// each one that proves the token (it touches no other field of j), once the job runs (its ranks said so in
// the store), to the supervisor through j.joins.
// At most gate.Max connections authenticate at once; refusals are logged
// in summary.
func (j *job) serveJoins(ln net.Listener, store *bootstrap.Server, token string, over <-chan struct{}) {
	g := gate.New("grun --join listener", gate.Max, gate.Every, logging.L())
	defer g.Close()
	for {
		g.Acquire(context.Background())
		c, err := ln.Accept()
		if err != nil {
			g.Release()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go j.serveJoin(c, store, token, over, g)
	}
}

func (j *job) serveJoin(c net.Conn, store *bootstrap.Server, token string, over <-chan struct{}, g *gate.Gate) {
	err := auth.Handshake(c, []byte(token), auth.Join, false, time.Now().Add(10*time.Second))
	g.Release()
	if err != nil {
		g.Refuse(c.RemoteAddr(), err)
		c.Close()
		return
	}
	r := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	typ, host, err := readJoinFrame(r)
	c.SetReadDeadline(time.Time{})
	if err != nil || typ != frameHello {
		c.Close()
		return
	}
	// A process that came before the ranks built their communicator
	// would take a rank's place in the store, not join: hold it until
	// the job runs.
	for {
		if _, ok := store.Value(bootstrap.ElasticRunningKey); ok {
			break
		}
		select {
		case <-over:
			writeJoinFrame(c, frameRefuse, []byte("the job ended"))
			c.Close()
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	req := &joinRequest{conn: c, r: r, host: string(host), done: make(chan struct{})}
	select {
	case j.joins <- req:
		<-req.done
	case <-over:
		writeJoinFrame(c, frameRefuse, []byte("the job ended"))
		c.Close()
	}
}

// admit answers a joining grun, on the supervisor's goroutine: a seat
// while fewer than MAX ranks live and the job is not ending, else a
// refusal saying why.
func (j *job) admit(req *joinRequest) {
	defer close(req.done)
	refuse := func(why string) {
		j.out.say("refused a grun --join from %s: %s", req.host, why)
		writeJoinFrame(req.conn, frameRefuse, []byte(why))
		req.conn.Close()
	}
	switch {
	case j.stopping || j.cause != nil || j.pending != nil:
		refuse("the job is ending")
		return
	case j.running >= j.cfg.elasticMax:
		refuse(fmt.Sprintf("the job runs %s already, the most --elastic %s allows", plural(j.running, "rank"), j.elasticFlag()))
		return
	}
	id := j.cfg.n + j.joined
	exports := append([]string(nil), j.cfg.env...)
	exports = append(exports,
		"GOCOLL_ELASTIC=1",
		// Init joins the running job under a job rank of its own;
		// GRUN_RANK only has to be one of the job's.
		"GRUN_RANK=0",
		"GRUN_SIZE="+strconv.Itoa(j.cfg.n),
		"GRUN_LOCAL_RANK=0",
		"GRUN_LOCAL_SIZE=1",
		"GRUN_ADDR="+j.jobFile.store,
	)
	payload := strconv.Itoa(id) + "\x00" + strings.Join(exports, "\x00")
	if err := writeJoinFrame(req.conn, frameAdmit, []byte(payload)); err != nil {
		req.conn.Close()
		return
	}
	j.joined++
	p := newJoinedProc(req.conn, req.r, req.host)
	r := &rank{id: id, idx: len(j.ranks), joined: true, host: req.host, proc: p}
	j.adopt(r, p)
	j.out.say("rank %d joined from host %s (grun --join); %s live (--elastic %s)", id, req.host, plural(j.running, "rank"), j.elasticFlag())
}

// joinedProc is a rank a joining grun runs, seen through its connection.
type joinedProc struct {
	conn   net.Conn
	host   string
	wmu    sync.Mutex
	remote atomic.Int64 // PROG's pid on its host, once told
	outR   *io.PipeReader
	errR   *io.PipeReader
	ended  chan struct{}
	status exitStatus
}

func newJoinedProc(c net.Conn, r *bufio.Reader, host string) *joinedProc {
	p := &joinedProc{conn: c, host: host, ended: make(chan struct{})}
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	p.outR, p.errR = outR, errR
	go func() {
		defer close(p.ended)
		defer outW.Close()
		defer errW.Close()
		defer c.Close()
		for {
			typ, b, err := readJoinFrame(r)
			if err != nil {
				p.status = exitStatus{err: fmt.Errorf("its grun --join on %s lost the connection: %v", host, err)}
				return
			}
			switch typ {
			case framePid:
				n, _ := strconv.Atoi(string(b))
				p.remote.Store(int64(n))
			case frameStdout:
				outW.Write(b)
			case frameStderr:
				errW.Write(b)
			case frameExit:
				p.status = decodeExit(string(b))
				return
			}
		}
	}()
	return p
}

func (p *joinedProc) pid() int                               { return int(p.remote.Load()) }
func (p *joinedProc) output() (io.ReadCloser, io.ReadCloser) { return p.outR, p.errR }

func (p *joinedProc) signal(sig syscall.Signal) error {
	select {
	case <-p.ended:
		return nil
	default:
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.conn.SetWriteDeadline(time.Now().Add(time.Second))
	writeJoinFrame(p.conn, frameSignal, []byte(strconv.Itoa(int(sig))))
	if sig == syscall.SIGKILL {
		// The joining grun kills PROG when the connection drops too.
		p.conn.Close()
	}
	return nil
}

func (p *joinedProc) running() bool {
	select {
	case <-p.ended:
		return false
	default:
		return true
	}
}

func (p *joinedProc) wait() exitStatus {
	<-p.ended
	return p.status
}

func encodeExit(s exitStatus) string {
	if s.signaled {
		return "signal " + strconv.Itoa(int(s.signal))
	}
	return "code " + strconv.Itoa(s.exitCode())
}

func decodeExit(s string) exitStatus {
	k, v, _ := strings.Cut(s, " ")
	n, err := strconv.Atoi(v)
	switch {
	case err != nil:
		return exitStatus{err: fmt.Errorf("bad exit status %q from grun --join", s)}
	case k == "signal":
		return exitStatus{signaled: true, signal: syscall.Signal(n)}
	}
	return exitStatus{code: n}
}

// runJoin is "grun --join FILE PROG ARGS": it asks the job's grun for a
// seat, runs PROG as that rank, relays its output and exit status to the
// job's grun and that grun's signals to PROG, and exits as PROG did.
func runJoin(ctx context.Context, cfg config, stderr io.Writer) int {
	say := func(format string, args ...any) {
		fmt.Fprintf(stderr, "grun: --join: "+format+"\n", args...)
	}
	f, err := readJobFile(cfg.joinFile)
	if err != nil {
		say("%v", err)
		return exitUsage
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	var d net.Dialer
	c, err := d.DialContext(dctx, "tcp", f.join)
	cancel()
	if err != nil {
		say("cannot reach the job's grun at %s: %v (has the job ended?)", f.join, err)
		return exitInternal
	}
	defer c.Close()
	if err := auth.Handshake(c, []byte(f.token), auth.Join, true, time.Now().Add(10*time.Second)); err != nil {
		say("the job's grun at %s: %v", f.join, err)
		return exitInternal
	}
	host := hostname()
	if err := writeJoinFrame(c, frameHello, []byte(host)); err != nil {
		say("the job's grun at %s: %v", f.join, err)
		return exitInternal
	}
	r := bufio.NewReader(c)
	typ, b, err := readJoinFrame(r)
	switch {
	case err != nil:
		say("the job's grun at %s closed the connection without an answer: %v", f.join, err)
		return exitInternal
	case typ == frameRefuse:
		say("the job refused this process: %s", b)
		return exitRefused
	case typ != frameAdmit:
		say("the job's grun at %s answered %q, not an admission", f.join, typ)
		return exitInternal
	}
	fields := strings.Split(string(b), "\x00")
	id := fields[0]
	sent, dropped, err := admittedEnv(fields[1:])
	if err != nil {
		say("the job's grun at %s: %v", f.join, err)
		return exitRefused
	}
	dropped = slices.DeleteFunc(dropped, func(name string) bool {
		return slices.ContainsFunc(cfg.env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
	})
	if len(dropped) > 0 {
		say("not taking the job's %s: a joining rank takes only GRUN_* and GOCOLL_* from the job; give what it needs with -x", strings.Join(dropped, ", "))
	}
	env := append(os.Environ(), sent...)
	env = append(env, cfg.env...)
	env = append(env, "GRUN_TOKEN="+f.token)
	proc, err := newLocalStarter().start(rankSpec{prog: cfg.prog, args: cfg.args, env: env})
	if err != nil {
		say("cannot start %s: %v", cfg.prog, err)
		writeJoinFrame(c, frameExit, []byte("code "+strconv.Itoa(exitNoStart)))
		return exitNoStart
	}
	if cfg.verbose {
		say("joined the job as rank %s: pid %d", id, proc.pid())
	}
	var wmu sync.Mutex
	send := func(typ byte, p []byte) {
		wmu.Lock()
		defer wmu.Unlock()
		writeJoinFrame(c, typ, p)
	}
	send(framePid, []byte(strconv.Itoa(proc.pid())))
	var pumps sync.WaitGroup
	pump := func(src io.Reader, typ byte) {
		defer pumps.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				send(typ, buf[:n])
			}
			if err != nil {
				return
			}
		}
	}
	stdout, stderrR := proc.output()
	pumps.Add(2)
	go pump(stdout, frameStdout)
	go pump(stderrR, frameStderr)
	// The connection is PROG's lifeline: signals come along it, and when
	// it drops (the job's grun died) PROG is stopped.
	go func() {
		for {
			typ, b, err := readJoinFrame(r)
			if err != nil {
				proc.signal(syscall.SIGTERM)
				time.AfterFunc(defaultGrace, func() { proc.signal(syscall.SIGKILL) })
				return
			}
			if typ == frameSignal {
				if n, err := strconv.Atoi(string(b)); err == nil {
					proc.signal(syscall.Signal(n))
				}
			}
		}
	}()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		for s := range sigs {
			if sig, ok := s.(syscall.Signal); ok {
				proc.signal(sig)
			}
		}
	}()
	st := proc.wait()
	drained := make(chan struct{})
	go func() {
		pumps.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(drainWait):
	}
	send(frameExit, []byte(encodeExit(st)))
	if cfg.verbose || st.failed() {
		say("rank %s %v", id, st)
	}
	return st.exitCode()
}

// listenJoins opens the join port where the store listens (listen, as
// storeAddrs chose it) and writes --job-file: the addresses a joining
// grun dials, those the job's remote hosts dial if it has any (a joiner
// elsewhere reaches grun as they do), else the local ranks'.
func (j *job) listenJoins(listen string, addrs map[string]string) (net.Listener, error) {
	host, _, _ := net.SplitHostPort(listen)
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("cannot open the join port for --job-file: %w", err)
	}
	store := ""
	for _, h := range j.hosts {
		if h.remote || store == "" {
			store = addrs[h.name]
		}
		if h.remote {
			break
		}
	}
	ip, _, _ := net.SplitHostPort(store)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	j.jobFile = jobFile{join: net.JoinHostPort(ip, port), store: store, token: j.token}
	if err := writeJobFile(j.cfg.jobFile, j.jobFile); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

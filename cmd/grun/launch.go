//go:build unix

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// rankSpec is everything needed to start one rank, wherever it runs.
type rankSpec struct {
	rank int
	prog string   // as given on the command line; resolved through PATH
	args []string // after prog
	env  []string // grun's environment plus the job's, "VAR=val"
	// Local ranks only: the CPU the rank is bound to, if bound.
	bound bool
	cpu   int

	// Remote ranks only: where, and what the remote command carries.
	remote  bool
	host    string
	dir     string   // grun's working directory, to cd to
	exports []string // the -x variables and GRUN_* but GRUN_TOKEN
	token   string   // passed on rsh's stdin, never on a command line
}

// process is a started rank as the job sees it. Everything the job does to
// a rank goes through here, so that a remote starter (ssh or a cluster
// agent, for multi-host jobs) only has to provide another implementation.
type process interface {
	pid() int
	// output returns the rank's stdout and stderr. The job reads both to
	// EOF, and closes them if EOF never comes.
	output() (stdout, stderr io.ReadCloser)
	// signal delivers sig to the rank and everything it started. A rank
	// that is already gone is not an error.
	signal(sig syscall.Signal) error
	// running reports whether the rank or anything it started is still
	// there (processes a rank left behind count too).
	running() bool
	// wait blocks until the rank itself exits. It is called once.
	wait() exitStatus
}

// starter starts one rank. It must not return before the rank is far
// enough along that signal reaches everything it will start.
type starter interface {
	start(spec rankSpec) (process, error)
}

// hostStarter starts local ranks itself and hands remote ones to rsh.
type hostStarter struct {
	local *localStarter
	rsh   *rshStarter
}

func newStarter(rsh []string) *hostStarter {
	local := newLocalStarter()
	return &hostStarter{local: local, rsh: &rshStarter{rsh: rsh, groups: local.groups}}
}

func (s *hostStarter) start(spec rankSpec) (process, error) {
	if spec.remote {
		return s.rsh.start(spec)
	}
	return s.local.start(spec)
}

// localStarter runs ranks as children of grun on this host.
type localStarter struct {
	groups *groupCache
}

func newLocalStarter() *localStarter { return &localStarter{groups: &groupCache{}} }

func (s *localStarter) start(spec rankSpec) (process, error) {
	// exec.Command resolves prog through PATH and keeps prog as argv[0],
	// which is what the rank would see if a shell had started it.
	cmd := exec.Command(spec.prog, spec.args...)
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	cmd.Env = spec.env
	cmd.SysProcAttr = rankSysProcAttr()
	// Pipes of our own rather than cmd.StdoutPipe: the latter is closed by
	// Wait, and a rank's children may still be writing to it then.
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	if spec.bound {
		err = startOnCPU(spec.cpu, cmd.Start)
	} else {
		err = cmd.Start()
	}
	// The rank holds its own copies now; ours would keep EOF from coming.
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, err
	}
	// Start returns once the child has exec'd, so setpgid has happened and
	// the rank's pid names its process group from here on.
	return &localProc{cmd: cmd, stdout: outR, stderr: errR, groups: s.groups}, nil
}

type localProc struct {
	cmd            *exec.Cmd
	stdout, stderr *os.File
	groups         *groupCache
}

func (p *localProc) pid() int { return p.cmd.Process.Pid }

func (p *localProc) output() (io.ReadCloser, io.ReadCloser) { return p.stdout, p.stderr }

// signal goes to the whole process group. Once the rank has been reaped its
// pid is free again, but the kernel does not hand it out while anything is
// still in the group, so signalling the group then reaches only what the
// rank left behind, or no one.
func (p *localProc) signal(sig syscall.Signal) error {
	err := syscall.Kill(-p.pid(), sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// running asks the kernel first, which is cheap and exact when the group is
// empty, and the process table only when something, if only a zombie, is
// left. EPERM means a member changed identity; grun could not stop it
// anyway.
func (p *localProc) running() bool {
	return syscall.Kill(-p.pid(), 0) == nil && p.groups.has(p.pid())
}

// groupCache shares one scan of the process table among all the ranks
// asked about in the same poll.
type groupCache struct {
	mu   sync.Mutex
	at   time.Time
	live map[int]bool
	ok   bool
}

func (c *groupCache) has(pgid int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) >= pollInterval/2 {
		c.live, c.ok = liveGroups()
		c.at = time.Now()
	}
	return !c.ok || c.live[pgid]
}

func (p *localProc) wait() exitStatus {
	err := p.cmd.Wait()
	ps := p.cmd.ProcessState
	if ps == nil {
		return exitStatus{err: err}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitStatus{signaled: true, signal: ws.Signal()}
	}
	return exitStatus{code: ps.ExitCode()}
}

// exitStatus is how a rank ended.
type exitStatus struct {
	code     int
	signaled bool
	signal   syscall.Signal
	err      error // waiting failed; how it ended is unknown

	host    string // remote ranks: the status is rsh's
	rshDied bool   // remote ranks: rsh itself was killed by signal
}

func (s exitStatus) failed() bool { return s.err != nil || s.signaled || s.code != 0 }

// exitCode is what grun exits with when this rank is the one that failed,
// following the shell's 128+signal convention.
func (s exitStatus) exitCode() int {
	switch {
	case s.err != nil:
		return 1
	case s.signaled:
		return 128 + int(s.signal)
	}
	return s.code
}

func (s exitStatus) String() string {
	switch {
	case s.err != nil:
		return fmt.Sprintf("could not be waited for (%v)", s.err)
	case s.rshDied:
		return fmt.Sprintf("lost: its rsh to %s was killed by signal %s", s.host, signalName(s.signal))
	case s.signaled:
		return "killed by signal " + signalName(s.signal)
	case s.host != "" && s.code == 255:
		return "exited with status 255, which is also ssh's status when it cannot connect or loses the connection"
	}
	return fmt.Sprintf("exited with status %d", s.code)
}

// signalName spells signals the way people search for them; syscall's
// String gives descriptions ("killed", "terminated") instead.
func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGALRM:
		return "SIGALRM"
	case syscall.SIGBUS:
		return "SIGBUS"
	case syscall.SIGFPE:
		return "SIGFPE"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGILL:
		return "SIGILL"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGSYS:
		return "SIGSYS"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGTRAP:
		return "SIGTRAP"
	case syscall.SIGUSR1:
		return "SIGUSR1"
	case syscall.SIGUSR2:
		return "SIGUSR2"
	case syscall.SIGXCPU:
		return "SIGXCPU"
	case syscall.SIGXFSZ:
		return "SIGXFSZ"
	}
	return fmt.Sprintf("signal %d", int(sig))
}

//go:build unix

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A remote rank is started as "RSH HOST COMMAND", COMMAND being one string
// for the remote login shell, as ssh takes it. rsh passes nothing but
// stdin, stdout, stderr and an exit status, and ssh does not pass signals
// on, so the remote command wraps the rank in a few lines of POSIX sh that
// turn rsh's stdin into the rank's lifeline:
//
//   - the rank runs in the background in a session of its own (setsid,
//     where the host has it), so that a signal to its process group
//     reaches everything it started;
//   - a reader loop takes signal names, one per line, from stdin and sends
//     each to that group: that is how grun's SIGTERM, SIGINT and SIGHUP
//     reach remote ranks. SIGINT and SIGQUIT are sent as SIGTERM: a
//     non-interactive shell starts background commands with those two
//     ignored, no shell can undo that, and a rank that ignores SIGINT
//     would only stop at SIGKILL;
//   - when stdin ends (grun closed it, grun died, ssh lost its connection
//     and sshd closed the session) the reader sends SIGKILL, so no rank
//     outlives its grun;
//   - the first line on stdin is the job token, which is thus never seen
//     on a command line (ps shows those to every user of both hosts);
//   - the wrapper exits with the rank's status, 128+N when signal N killed
//     it, as sh reports it; whatever the rank left in its group is killed.
//
// This works the same under ssh, where sshd makes the remote shell a
// session leader, and under rsh commands that make no session at all (such
// as "ip netns exec NS sh -c"), because it relies on nothing but the pipe.
const remoteScript = `IFS= read -r t || exit 127
cd %s || exit 127
exec 3<&0
s=$(command -v setsid)
GRUN_TOKEN=$t $s env %s </dev/null 3<&- &
p=$!
(while read -r c; do case $c in INT|QUIT) c=TERM;; esac; kill -s "$c" -- -$p 2>/dev/null || kill -s "$c" $p 2>/dev/null; done
kill -s KILL -- -$p 2>/dev/null || kill -s KILL $p 2>/dev/null) <&3 3<&- &
c=$!
exec 3<&-
wait $p 2>/dev/null
r=$?
kill -s KILL -- -$p 2>/dev/null
kill $c 2>/dev/null
exit $r`

// shellQuote quotes s for a POSIX shell: inside single quotes everything is
// literal but the single quote itself, which is spelled '\”.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=/.,:@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// remoteCommand is the one shell string that rsh carries to the host:
// change to dir, then run prog with args under env (the -x variables and
// GRUN_*, nothing of grun's own environment), inside the lifeline wrapper.
func remoteCommand(dir string, env []string, prog string, args []string) string {
	words := make([]string, 0, len(env)+len(args)+1)
	for _, kv := range env {
		words = append(words, shellQuote(kv))
	}
	// env would take a program named "A=b" for one more variable.
	if strings.Contains(prog, "=") && !strings.Contains(prog, "/") {
		prog = "./" + prog
	}
	words = append(words, shellQuote(prog))
	for _, a := range args {
		words = append(words, shellQuote(a))
	}
	return fmt.Sprintf(remoteScript, shellQuote(dir), strings.Join(words, " "))
}

// rshStarter starts ranks on other hosts through rsh (ssh by default).
type rshStarter struct {
	rsh    []string // the --rsh command, split into words
	groups *groupCache
}

func (s *rshStarter) start(spec rankSpec) (process, error) {
	argv := append(append([]string(nil), s.rsh[1:]...), spec.host, remoteCommand(spec.dir, spec.exports, spec.prog, spec.args))
	cmd := exec.Command(s.rsh[0], argv...)
	if cmd.Err != nil {
		return nil, fmt.Errorf("rsh %q: %w", s.rsh[0], cmd.Err)
	}
	// rsh itself gets grun's whole environment: ssh needs SSH_AUTH_SOCK,
	// HOME and the like. The rank gets only what the command line carries.
	cmd.Env = spec.env
	cmd.SysProcAttr = rankSysProcAttr()
	// The lifeline: os.Pipe's ends are close-on-exec, so no other rank's
	// rsh holds this one's write end and keeps EOF from coming.
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = ctlR, outW, errW
	err = cmd.Start()
	ctlR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		ctlW.Close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("rsh %q: %w", s.rsh[0], err)
	}
	// The pipe holds 64 KiB at least; the token line never blocks.
	if _, err := ctlW.WriteString(spec.token + "\n"); err != nil {
		ctlW.Close()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("rsh %q: passing the token: %w", s.rsh[0], err)
	}
	return &rshProc{cmd: cmd, host: spec.host, ctl: ctlW, stdout: outR, stderr: errR, groups: s.groups}, nil
}

// rshProc is a remote rank as grun sees it: the local rsh process, its
// output, and the write end of the lifeline.
type rshProc struct {
	cmd            *exec.Cmd
	host           string
	stdout, stderr *os.File
	groups         *groupCache

	mu       sync.Mutex
	ctl      *os.File  // nil once closed
	exited   bool      // rsh has been reaped
	killedAt time.Time // the first SIGKILL; zero before
}

// rshKillDelay is how long after the first SIGKILL grun leaves rsh alone,
// so that the remote wrapper can act on the KILL line and the closed
// lifeline: an rsh such as "ip netns exec" keeps the wrapper in rsh's local
// process group, and killing that group at once would kill the wrapper's
// reader loop before it could kill the rank. Later SIGKILLs (the job
// repeats them) end rsh, so a hung connection still cannot keep the job
// alive.
const rshKillDelay = 500 * time.Millisecond

func (p *rshProc) pid() int { return p.cmd.Process.Pid }

func (p *rshProc) output() (io.ReadCloser, io.ReadCloser) { return p.stdout, p.stderr }

// ctlWait bounds a write to the lifeline: a wrapper that stopped reading
// must not stall grun, which then falls back on closing the pipe.
const ctlWait = 200 * time.Millisecond

// signal asks the remote wrapper to signal the rank's group. rsh itself is
// left alone, for ssh would die of the signal and the rank would get
// SIGKILL on EOF instead of the signal meant for it; SIGKILL is the
// exception: it also ends the lifeline, and a SIGKILL repeated
// rshKillDelay later ends rsh, so that a hung connection cannot keep the
// job alive. Once rsh has exited, anything left in its
// local process group gets the signal too.
func (p *rshProc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctl != nil {
		p.ctl.SetWriteDeadline(time.Now().Add(ctlWait))
		if _, err := p.ctl.WriteString(strings.TrimPrefix(signalName(sig), "SIG") + "\n"); err != nil || sig == syscall.SIGKILL {
			p.ctl.Close()
			p.ctl = nil
		}
	}
	local := p.exited
	if sig == syscall.SIGKILL {
		if p.killedAt.IsZero() {
			p.killedAt = time.Now()
		}
		local = local || time.Since(p.killedAt) >= rshKillDelay
	}
	if local {
		if err := syscall.Kill(-p.pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
	}
	return nil
}

func (p *rshProc) running() bool {
	return syscall.Kill(-p.pid(), 0) == nil && p.groups.has(p.pid())
}

// wait reaps rsh and then closes the lifeline: with rsh gone, the remote
// side must not go on (a killed "ip netns exec" leaves the wrapper's reader
// loop behind, which EOF sends on its way with the rank).
func (p *rshProc) wait() exitStatus {
	err := p.cmd.Wait()
	p.mu.Lock()
	p.exited = true
	if p.ctl != nil {
		p.ctl.Close()
		p.ctl = nil
	}
	p.mu.Unlock()
	ps := p.cmd.ProcessState
	if ps == nil {
		return exitStatus{err: err, host: p.host}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitStatus{signaled: true, signal: ws.Signal(), host: p.host, rshDied: true}
	}
	code := ps.ExitCode()
	// The shell's 128+N for a rank that signal N killed. A rank that
	// exits with such a status by itself is reported as killed; sh makes
	// the two look the same.
	if code > 128 && code <= 128+64 {
		return exitStatus{signaled: true, signal: syscall.Signal(code - 128), host: p.host}
	}
	return exitStatus{code: code, host: p.host}
}

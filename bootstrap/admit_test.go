//go:build linux

package bootstrap

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gocoll/gocoll/internal/auth"
)

// startMunged starts a munged of the test's own, as the munge user, on a
// socket of its own (with the machine's key, /etc/munge/munge.key), and
// returns the socket and a function that stops it; the test's end stops
// it too.
func startMunged(t *testing.T) (socket string, stop func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test starts munged as the munge user: run it as root (CI does)")
	}
	if _, err := exec.LookPath("munged"); err != nil {
		t.Fatal("munged not found: this test runs a real munged (apt-get install munge; .ci/install does)")
	}
	u, err := user.Lookup("munge")
	if err != nil {
		t.Fatalf("no munge user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// munged wants every directory above its socket searchable by all,
	// which t.TempDir's are not.
	dir := openTempDir(t)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	socket = filepath.Join(dir, "munge.socket")
	pidFile := filepath.Join(dir, "munged.pid")
	out, err := exec.Command("runuser", "-u", "munge", "--", "munged", "-S", socket,
		"--pid-file", pidFile, "--seed-file", filepath.Join(dir, "seed"), "--log-file", filepath.Join(dir, "log")).CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		t.Fatalf("munged: %v\n%s\n%s", err, out, log)
	}
	stop = func() {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if pid <= 0 || syscall.Kill(pid, syscall.SIGTERM) != nil {
			return
		}
		for end := time.Now().Add(5 * time.Second); syscall.Kill(pid, 0) == nil && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Cleanup(stop)
	return socket, stop
}

// openTempDir makes a directory that every user may search and read
// (t.TempDir's parents are not), removed when the test ends.
func openTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gocoll-bootstrap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// rawAdmit opens a connection to s, runs the handshake without a token,
// and returns a client on it that has not asked to be admitted yet, with
// the connection's session key.
func rawAdmit(t *testing.T, s *Server) (*Client, [auth.KeyLen]byte) {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	return rawAdmitOn(t, c)
}

// rawAdmitFrom is rawAdmit from network namespace ns (see netnsPair): a
// connection from another host.
func rawAdmitFrom(t *testing.T, ns string, s *Server) (*Client, [auth.KeyLen]byte) {
	t.Helper()
	return rawAdmitOn(t, dialFrom(t, ns, s.Addr()))
}

// rawAdmitOn is rawAdmit on connection c, which it closes when the test
// ends.
func rawAdmitOn(t *testing.T, c net.Conn) (*Client, [auth.KeyLen]byte) {
	t.Helper()
	t.Cleanup(func() { c.Close() })
	session, err := auth.HandshakeKey(c, nil, auth.Store, true, time.Now().Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return &Client{turn: make(chan struct{}, 1), conn: c, r: bufio.NewReader(c)}, session
}

// dialFrom connects to addr from network namespace ns: the socket is
// made by a thread that entered ns for the moment, so the connection
// comes from the other end of netnsPair's link, as from another host.
func dialFrom(t *testing.T, ns, addr string) net.Conn {
	t.Helper()
	type dialed struct {
		c   net.Conn
		err error
	}
	done := make(chan dialed, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- dialed{nil, err}
			return
		}
		defer home.Close()
		there, err := os.Open("/run/netns/" + ns)
		if err != nil {
			runtime.UnlockOSThread()
			done <- dialed{nil, err}
			return
		}
		defer there.Close()
		if err := unix.Setns(int(there.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- dialed{nil, fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		c, err := net.Dial("tcp", addr)
		// A thread that cannot go home stays locked, and ends with this
		// goroutine.
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- dialed{c, err}
	}()
	d := <-done
	if d.err != nil {
		t.Fatalf("dial %s from %s: %v", addr, ns, d.err)
	}
	return d.c
}

// slurmStore serves the store of job, a tokenless Slurm job of two ranks,
// with a munged of the test's own (at socket), on this end of a netnsPair
// whose other end, ns, plays another host. The test's end closes it.
func slurmStore(t *testing.T, job string) (srv *Server, socket, ns string) {
	t.Helper()
	ns, local, _ := netnsPair(t)
	socket, _ = startMunged(t)
	srv, err := ServeFor(Config{Rank: 0, Size: 2, Addr: local + ":0", Source: "slurm", Job: job, Munge: true, MungeSocket: socket})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, socket, ns
}

// TestMungeCredentialBound: under Slurm, a store without a token admits a
// connection from another host whose munge credential is of its uid and
// bound to that connection, and hands it the job's secret with a
// credential of its own bound to the same connection. A credential
// presented a second time, on another connection, is refused (munged's
// replay check), and so is a fresh credential bound to another
// connection (relayed) or to another job: each refusal matches
// auth.ErrDenied and ErrJoinRefused.
func TestMungeCredentialBound(t *testing.T) {
	const job = "slurm 4242.0"
	srv, socket, ns := slurmStore(t, job)
	ctx := testCtx(t)
	cred := func(session [auth.KeyLen]byte, job string) []byte {
		c, err := mungeEncode(ctx, socket, mungeBinding(byRank, session, job))
		if err != nil {
			t.Fatal(err)
		}
		return []byte(c)
	}

	// Its own credential, on its own connection: admitted.
	a, sa := rawAdmitFrom(t, ns, srv)
	used := cred(sa, job)
	answer, err := a.do(ctx, opAdmit, "", used)
	if err != nil {
		t.Fatalf("a credential bound to its connection: %v", err)
	}
	if len(answer) < sealedLen {
		t.Fatalf("the answer to an admit: %d bytes, want the sealed secret and the store's credential", len(answer))
	}
	secret, err := openSecret(sa, answer[:sealedLen])
	if err != nil || len(secret) != secretLen {
		t.Fatalf("the job secret: %d bytes, %v", len(secret), err)
	}
	// And the store's own credential, bound to the same connection as
	// made by the store.
	if why := mungeCheck(ctx, socket, string(answer[sealedLen:]), mungeBinding(byStore, sa, job)); why != "" {
		t.Fatalf("the store's credential: %s", why)
	}

	// Another connection's session key, for credentials made for it.
	_, elsewhere := rawAdmitFrom(t, ns, srv)
	refusals := []struct {
		name string
		cred []byte
		want string
	}{
		{"replayed onto another connection", used, "Replayed credential"},
		{"fresh, made for another connection", cred(elsewhere, job), "made for another connection"},
		{"of another job", cred(elsewhere, "slurm 4243.0"), "made for another connection or job"},
		{"garbage", []byte("MUNGE:garbage:"), "munge credential was refused"},
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			c, _ := rawAdmitFrom(t, ns, srv)
			_, err := c.do(ctx, opAdmit, "", r.cred)
			if !errors.Is(err, auth.ErrDenied) || !errors.Is(err, ErrJoinRefused) || !strings.Contains(err.Error(), r.want) {
				t.Fatalf("admit: %v; want auth.ErrDenied and ErrJoinRefused saying %q", err, r.want)
			}
		})
	}
	eventually(t, "the store counts each refusal", func() bool { return srv.Refused() == len(refusals) })

	// Through DialJob, as a rank of the store's host does: the same
	// secret.
	c, err := DialJob(ctx, Config{Addr: srv.Addr(), Job: job, Munge: true, MungeSocket: socket})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !bytes.Equal(c.LinkToken(), secret) {
		t.Errorf("a second rank's link token differs from the first's: the job has one secret")
	}
}

// TestJobSecret: a store without a token hands every admitted connection
// the same 256-bit secret, each sealed under its own session key (which
// no other key opens); a client with a token links with the token.
func TestJobSecret(t *testing.T) {
	srv := newServer(t, nil)
	ctx := testCtx(t)
	var first []byte
	for i := range 3 {
		c, err := Dial(ctx, srv.Addr(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if len(c.LinkToken()) != secretLen || bytes.Equal(c.LinkToken(), make([]byte, secretLen)) {
			t.Fatalf("client %d: link token %x, want 32 random bytes", i, c.LinkToken())
		}
		if i == 0 {
			first = c.LinkToken()
		} else if !bytes.Equal(first, c.LinkToken()) {
			t.Fatalf("client %d got another secret than client 0", i)
		}
	}
	if other := newServer(t, nil); true {
		c, err := Dial(ctx, other.Addr(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if bytes.Equal(first, c.LinkToken()) {
			t.Fatal("two stores drew the same secret")
		}
	}
	var k1, k2 [auth.KeyLen]byte
	k2[0] = 1
	if _, err := openSecret(k2, sealSecret(k1, first)); !errors.Is(err, auth.ErrDenied) {
		t.Errorf("a secret sealed for one connection opened under another's key: %v", err)
	}
	tokened := newServer(t, testToken)
	c, err := Dial(ctx, tokened.Addr(), testToken)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !bytes.Equal(c.LinkToken(), testToken) {
		t.Errorf("with a token, the link token is %q, want the token", c.LinkToken())
	}
}

// TestAdmitFirst: a client of a store without a token that asks anything
// before being admitted is dropped.
func TestAdmitFirst(t *testing.T) {
	srv := newServer(t, nil)
	c, _ := rawAdmit(t, srv)
	if _, err := c.do(context.Background(), opGet, "k", nil); err == nil {
		t.Fatal("a get before admission was answered")
	}
	eventually(t, "the store counts the refusal", func() bool { return srv.Refused() == 1 })
}

// countRuns puts commands named names ahead of the real ones on PATH for
// the rest of the test: each logs its run and then is the real command.
// It returns how many times each has run so far.
func countRuns(t *testing.T, names ...string) (runs func(name string) int) {
	t.Helper()
	dir := t.TempDir()
	for _, name := range names {
		real, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("%s not found: this test runs the real one (apt-get install munge)", name)
		}
		script := "#!/bin/sh\necho run >> " + filepath.Join(dir, name+".runs") + "\nexec " + real + ` "$@"` + "\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return func(name string) int {
		b, _ := os.ReadFile(filepath.Join(dir, name+".runs"))
		return strings.Count(string(b), "run\n")
	}
}

// TestLocalRankNoMunge: under Slurm, a store without a token admits a rank
// of its own host by uid and runs no unmunge for it, nor a munge to prove
// itself; the rank, which found the store its own user's, runs no munge
// either. A connection of this host that sends a credential all the same
// (a real one, or garbage) is admitted the same way, the credential read
// with the request and left undecoded, and gets the job's secret alone.
// A rank of another host costs the store one unmunge and one munge, which
// the counts see.
func TestLocalRankNoMunge(t *testing.T) {
	const job = "slurm 4343.0"
	srv, socket, ns := slurmStore(t, job)
	runs := countRuns(t, "munge", "unmunge")
	ctx := testCtx(t)
	cred := func(session [auth.KeyLen]byte) []byte {
		return mungeCred(ctx, t, socket, mungeBinding(byRank, session, job))
	}

	c, err := DialJob(ctx, Config{Addr: srv.Addr(), Source: "slurm", Job: job, Munge: true, MungeSocket: socket})
	if err != nil {
		t.Fatalf("a rank of the store's host: %v", err)
	}
	defer c.Close()
	if err := c.Join(ctx, 0, 2, job); err != nil {
		t.Fatalf("a rank of the store's host: %v", err)
	}
	if m, u := runs("munge"), runs("unmunge"); m != 0 || u != 0 {
		t.Errorf("admitting a rank of the store's host ran munge %d times, unmunge %d times; want neither", m, u)
	}
	secret := c.LinkToken()
	if len(secret) != secretLen {
		t.Fatalf("the rank's link token: %d bytes, want the job's secret", len(secret))
	}

	for _, tc := range []struct {
		name string
		cred func(session [auth.KeyLen]byte) []byte
	}{
		{"its own credential", cred},
		{"garbage", func([auth.KeyLen]byte) []byte { return []byte("MUNGE:garbage:") }},
	} {
		t.Run("this host, "+tc.name, func(t *testing.T) {
			a, sa := rawAdmit(t, srv)
			sent := tc.cred(sa)
			m, u := runs("munge"), runs("unmunge")
			answer, err := a.do(ctx, opAdmit, "", sent)
			if err != nil {
				t.Fatalf("admit: %v", err)
			}
			if len(answer) != sealedLen {
				t.Errorf("the answer: %d bytes, want the sealed secret alone (%d): no store credential for a rank of its host", len(answer), sealedLen)
			}
			if got, err := openSecret(sa, answer[:min(len(answer), sealedLen)]); err != nil || !bytes.Equal(got, secret) {
				t.Errorf("the secret: %x, %v; want the job's, %x", got, err, secret)
			}
			if dm, du := runs("munge")-m, runs("unmunge")-u; dm != 0 || du != 0 {
				t.Errorf("the store ran munge %d times, unmunge %d times for it; want neither", dm, du)
			}
			// The protocol goes on: the credential was all of the admit.
			if _, err := a.do(ctx, opPut, "after-admit", []byte("x")); err != nil {
				t.Errorf("a put after the admit: %v", err)
			}
		})
	}

	t.Run("another host", func(t *testing.T) {
		a, sa := rawAdmitFrom(t, ns, srv)
		sent := cred(sa)
		m, u := runs("munge"), runs("unmunge")
		answer, err := a.do(ctx, opAdmit, "", sent)
		if err != nil {
			t.Fatalf("admit: %v", err)
		}
		if dm, du := runs("munge")-m, runs("unmunge")-u; dm != 1 || du != 1 {
			t.Errorf("the store ran munge %d times, unmunge %d times; want once each (its check, its proof)", dm, du)
		}
		if len(answer) <= sealedLen {
			t.Fatalf("the answer: %d bytes, want the store's credential after the secret", len(answer))
		}
		if why := mungeCheck(ctx, socket, string(answer[sealedLen:]), mungeBinding(byStore, sa, job)); why != "" {
			t.Errorf("the store's credential: %s", why)
		}
	})
}

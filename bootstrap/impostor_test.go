//go:build linux

package bootstrap

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/auth"
)

// TestStoreOfAnotherUser: a rank of a job without a token dials its
// store's address on this host, where a process of another user (uid
// nobody, through runuser) holds the port. The rank refuses it in one
// line naming the address and that uid, matching auth.ErrDenied and
// ErrJoinRefused, having sent it nothing: not a byte of the handshake,
// let alone an admit. The same listener run as the rank's own user gets
// the handshake. With GOCOLL_INSECURE=1 the rank does not look.
func TestStoreOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs a listener as another user with runuser: run it as root (CI does)")
	}
	// The test binary, where nobody may run it.
	bin := filepath.Join(openTempDir(t), "bootstrap.test")
	if out, err := exec.Command("cp", os.Args[0], bin).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	tests := []struct {
		name     string
		user     string // "": the test's own
		insecure bool
		refused  bool
	}{
		{"another user's", "nobody", false, true},
		{"this user's", "", false, false},
		{"another user's, GOCOLL_INSECURE=1", "nobody", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			args := []string{"env", "BOOTSTRAP_TEST_ROLE=listener", bin, "-test.run=^$"}
			if tt.user != "" {
				args = append([]string{"runuser", "-u", tt.user, "--"}, args...)
			}
			cmd := exec.CommandContext(ctx, args[0], args[1:]...)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			lines := bufio.NewScanner(out)
			if !lines.Scan() {
				t.Fatalf("the listener said no address: %v", lines.Err())
			}
			addr := lines.Text()

			dctx, dcancel := context.WithTimeout(ctx, 500*time.Millisecond)
			c, err := DialJob(dctx, Config{Addr: addr, Insecure: tt.insecure})
			dcancel()
			if c != nil {
				c.Close()
			}
			lines.Scan()
			got := lines.Text()
			if tt.refused {
				for _, w := range []string{addr, "uid 65534", "uid 0"} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("refusal %q does not say %q", err, w)
					}
				}
				if !errors.Is(err, auth.ErrDenied) || !errors.Is(err, ErrJoinRefused) || strings.Contains(err.Error(), "\n") {
					t.Errorf("refusal %q: want one line matching auth.ErrDenied and ErrJoinRefused", err)
				}
				if got != "got=0" {
					t.Errorf("the listener of another user heard %q from the rank, want got=0", got)
				}
				return
			}
			// Not refused for its owner: the rank went on to the
			// handshake, which the listener does not answer.
			if err == nil || errors.Is(err, auth.ErrDenied) || strings.Contains(err.Error(), "does not trust") {
				t.Errorf("DialJob: %v, want it to time out in the handshake", err)
			}
			if got == "got=0" || !strings.HasPrefix(got, "got=") {
				t.Errorf("the listener heard %q, want the handshake's bytes", got)
			}
		})
	}
}

// TestStoreProvesItself: under Slurm, a rank of another host (a network
// namespace) that proved itself with munge takes the job's secret only
// from a store that proves itself the same way. A fake store that admits
// it and sends a secret with no credential of its own, with a credential
// bound to another connection or another job, or with the rank's own
// credential reflected back, is refused in one line matching
// auth.ErrDenied and ErrJoinRefused. (The real store proves itself in
// TestTokenlessRemoteRank's Slurm case.)
func TestStoreProvesItself(t *testing.T) {
	ns, local, _ := netnsPair(t)
	socket, _ := startMunged(t)
	tests := []struct {
		name string
		cred func(ctx context.Context, session [auth.KeyLen]byte, rankCred []byte) []byte
		want string
	}{
		{"no credential", func(context.Context, [auth.KeyLen]byte, []byte) []byte { return nil }, "sent no munge credential"},
		{"another connection's", func(ctx context.Context, _ [auth.KeyLen]byte, _ []byte) []byte {
			var other [auth.KeyLen]byte
			rand.Read(other[:])
			return mungeCred(ctx, t, socket, mungeBinding(byStore, other, remoteJob))
		}, "made for another connection"},
		{"another job's", func(ctx context.Context, session [auth.KeyLen]byte, _ []byte) []byte {
			return mungeCred(ctx, t, socket, mungeBinding(byStore, session, "slurm 78.0"))
		}, "made for another connection or job"},
		{"the rank's own, reflected", func(_ context.Context, _ [auth.KeyLen]byte, rankCred []byte) []byte {
			return rankCred
		}, "reflected"},
		{"garbage", func(context.Context, [auth.KeyLen]byte, []byte) []byte { return []byte("MUNGE:garbage:") }, "munge credential was refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ln, err := net.Listen("tcp", local+":0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			served := make(chan error, 1)
			go func() { served <- fakeStore(ctx, ln, tt.cred) }()
			cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestHelperRemoteRank$", "-test.count=1")
			cmd.Env = append(os.Environ(), "GOCOLL_TEST_STORE="+ln.Addr().String(), "GOCOLL_TEST_MUNGE="+socket)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the remote rank: %v\n%s", err, out)
			}
			if err := <-served; err != nil {
				t.Fatalf("the fake store: %v", err)
			}
			said := string(out)
			for _, w := range []string{"refused=true denied=true token= ", ln.Addr().String(), "did not prove it runs as this job's user", tt.want} {
				if !strings.Contains(said, w) {
					t.Fatalf("the remote rank said:\n%s\nwant it refused the store, saying %q", said, w)
				}
			}
		})
	}
}

// mungeCred is a credential of this process's uid carrying payload.
func mungeCred(ctx context.Context, t *testing.T, socket, payload string) []byte {
	c, err := mungeEncode(ctx, socket, payload)
	if err != nil {
		t.Error(err)
	}
	return []byte(c)
}

// fakeStore plays a store without a token for one connection on ln: it
// runs the handshake, takes the admit, and answers it with a secret of
// its own and the credential cred makes of the session key and the
// rank's credential.
func fakeStore(ctx context.Context, ln net.Listener, cred func(context.Context, [auth.KeyLen]byte, []byte) []byte) error {
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	session, err := auth.HandshakeKey(c, nil, auth.Store, false, time.Now().Add(10*time.Second))
	if err != nil {
		return err
	}
	r := bufio.NewReader(c)
	op, _, rankCred, err := readRequest(r)
	if err != nil || op != opAdmit || len(rankCred) == 0 {
		return errors.New("the rank sent no admit with a munge credential")
	}
	fake := newSecret()
	if err := writeFrame(c, statusOK, sealSecret(session, fake[:]), cred(ctx, session, rankCred)); err != nil {
		return err
	}
	// The rank hangs up.
	_, err = r.ReadByte()
	if err == nil {
		return errors.New("the rank went on after the admit")
	}
	return nil
}

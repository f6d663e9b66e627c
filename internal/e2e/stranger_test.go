package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/freeport"
)

// TestStrangerAsOtherUser is issue 41's first finding end to end: a job of
// 2 ranks started as torchrun starts them, over TCP and over shared memory,
// without GRUN_TOKEN and then with one, and while it runs a process of
// another user (uid nobody, through runuser) tries to join its store as
// rank 1 and scan it, and to handshake with rank 0's TCP or shared-memory
// listener, with no token and with a wrong one. Each attempt is refused,
// and the job finishes.
func TestStrangerAsOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs a stranger as another user with runuser: run it as root (CI does)")
	}
	// The stranger's program, where nobody may run it.
	dir, err := os.MkdirTemp("", "gocoll-stranger-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stranger := filepath.Join(dir, "stranger")
	if out, err := exec.Command("go", "build", "-o", stranger, "github.com/gocoll/gocoll/internal/e2e/testdata/stranger").CombinedOutput(); err != nil {
		t.Fatalf("building the stranger: %v\n%s", err, out)
	}
	tests := []struct {
		name, transport, token, guess string
	}{
		{"tcp, no token", "tcp", "", ""},
		{"shm, no token", "shm", "", ""},
		{"tcp, token, stranger guesses", "tcp", "0123456789abcdef0123456789abcdef", "hunter2-hunter2-hunter2"},
		{"shm, token, stranger guesses", "shm", "0123456789abcdef0123456789abcdef", "hunter2-hunter2-hunter2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			port := freeport.Get(t)
			cmds := make([]*exec.Cmd, 2)
			outs := make([]*bytes.Buffer, 2)
			for r := range cmds {
				env := []string{"RANK=" + strconv.Itoa(r), "WORLD_SIZE=2", "LOCAL_RANK=" + strconv.Itoa(r), "LOCAL_WORLD_SIZE=2",
					"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "GOCOLL_TIMEOUT=60s", "GOCOLL_TRANSPORT=" + tt.transport}
				if tt.token != "" {
					env = append(env, "GRUN_TOKEN="+tt.token)
				}
				cmd := exec.CommandContext(ctx, filepath.Join(bin, "collcheck"), "-rounds", "6")
				cmd.Env = append(launcherEnv(), env...)
				outs[r] = &bytes.Buffer{}
				cmd.Stdout, cmd.Stderr = outs[r], outs[r]
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				defer cmd.Process.Kill()
				cmds[r] = cmd
			}
			// The test is this job's user: it reads where rank 0 listens,
			// as a stranger scanning ports would find it.
			var spy *bootstrap.Client
			for spy == nil {
				spy, err = bootstrap.Dial(ctx, "127.0.0.1:"+port, []byte(tt.token))
				if err != nil && ctx.Err() != nil {
					t.Fatal(err)
				}
			}
			defer spy.Close()
			args := []string{"-store", "127.0.0.1:" + port}
			// Under whatever namespace the communicator gives its
			// transports' keys.
			found := map[string]string{}
			for end := time.Now().Add(20 * time.Second); len(found) < 1 && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
				m, err := spy.Scan(ctx, "")
				if err != nil {
					t.Fatal(err)
				}
				for k, v := range m {
					for _, f := range []struct{ flag, suffix string }{{"-tcp", "tcp/addr/0"}, {"-shm", "shm/addr/0"}} {
						if strings.HasSuffix(k, f.suffix) && found[f.flag] == "" {
							found[f.flag] = string(v)
						}
					}
				}
			}
			for _, f := range []string{"-tcp", "-shm"} {
				if found[f] != "" {
					args = append(args, f, found[f])
				}
			}
			if len(args) < 4 {
				t.Fatalf("rank 0 published no listener (%q)", args)
			}
			cmd := exec.CommandContext(ctx, "runuser", append([]string{"-u", "nobody", "--", "env", "STRANGER_TOKEN=" + tt.guess, stranger}, args...)...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the stranger: %v\n%s", err, out)
			}
			said := strings.TrimSpace(string(out))
			t.Logf("the stranger, %s:\n%s", strings.Join(args, " "), said)
			// Refused by the job, not by a closed port: the job still
			// ran when the stranger came.
			if strings.Contains(said, "ADMITTED") || strings.Count(said, "refused") != len(args)/2 || strings.Contains(said, "connection refused") {
				t.Errorf("the stranger got in, or found a listener closed, or tried less than all of %q:\n%s", args, said)
			}
			for r, cmd := range cmds {
				if err := cmd.Wait(); err != nil || !strings.Contains(outs[r].String(), "rank "+strconv.Itoa(r)+" of 2: ok") {
					t.Errorf("rank %d: %v:\n%s", r, err, outs[r])
				}
			}
		})
	}
}

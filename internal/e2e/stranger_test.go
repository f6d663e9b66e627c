//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/freeport"
	"github.com/gocoll/gocoll/internal/testmode"
)

// TestStrangerAsOtherUser is issue 41's first finding end to end, under
// each launcher: a job of 4 ranks on 2 pretended hosts (so every rank
// listens for TCP and for shared memory) started by grun, and as srun,
// mpirun and torchrun start ranks (launcherStyles), without GRUN_TOKEN
// where the launcher allows it (grun always makes one) and with one.
// While its ranks hold after Init, a process of another user (uid nobody,
// through runuser) joins the store as rank 1 and scans it, and runs the
// handshake with every rank's TCP and shared-memory listener, with no
// token and with a wrong one. It finds them as anyone may: in /proc/net.
//
// Each attempt is refused the way the job's setting says: with a token
// (grun's, or GRUN_TOKEN), the store and the TCP links answer the wrong
// token with auth.ErrDenied; without one the store hangs up on another uid
// before a word (peercred.ErrOtherUser), and the TCP links, which hold the
// job's secret the store handed the ranks, answer auth.ErrDenied; the
// shared-memory sockets hang up on another uid in either case. The job logs each refusal with its reason,
// then runs its checks and finishes.
func TestStrangerAsOtherUser(t *testing.T) {
	t.Parallel()
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
	prog, err := os.ReadFile(filepath.Join(bin, "stranger"))
	if err == nil {
		err = os.WriteFile(stranger, prog, 0o755)
	}
	if err != nil {
		t.Fatalf("copying the stranger's program where nobody may run it: %v", err)
	}
	const n, jobToken, guess = 4, recipeToken, "hunter2-hunter2-hunter2"
	type setup struct {
		launcher string
		jobToken bool   // the job has a token (grun's own, or GRUN_TOKEN)
		guess    string // the stranger's token
	}
	setups := []setup{
		{"grun", true, ""},
		{"grun", true, guess},
	}
	for _, st := range launcherStyles {
		setups = append(setups, setup{st.name, false, ""}, setup{st.name, true, guess})
	}
	if testmode.Quick() {
		// Shrunk: grun's token against a guess, and issue 41's own
		// case, a tokenless torchrun job.
		setups = []setup{{"grun", true, guess}, {"torchrun", false, ""}}
	}
	for _, s := range setups {
		name := s.launcher + ", no token"
		if s.jobToken {
			name = s.launcher + ", token, stranger guesses"
			if s.guess == "" {
				name = s.launcher + ", token, stranger has none"
			}
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			hold := filepath.Join(t.TempDir(), "go")
			common := []string{"GOCOLL_TIMEOUT=60s", "GOCOLL_FAKE_HOSTS=2"}
			check := []string{"-hold", hold, "-light", "-small"} // who may join, not the data
			var cmds []*exec.Cmd
			var outs []*bytes.Buffer
			start := func(cmd *exec.Cmd) {
				outs = append(outs, &bytes.Buffer{})
				cmd.Stdout, cmd.Stderr = outs[len(outs)-1], outs[len(outs)-1]
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cmd.Process.Kill() })
				cmds = append(cmds, cmd)
			}
			var store string // the rendezvous address, host:port
			if s.launcher == "grun" {
				cmd := exec.CommandContext(ctx, filepath.Join(bin, "grun"), append([]string{"-n", strconv.Itoa(n), filepath.Join(bin, "collcheck")}, check...)...)
				cmd.Env = append(launcherEnv(), common...)
				start(cmd)
			} else {
				port := freeport.Get(t)
				store = "127.0.0.1:" + port
				for r := 0; r < n; r++ {
					cmd := exec.CommandContext(ctx, filepath.Join(bin, "collcheck"), check...)
					cmd.Env = append(append(launcherEnv(), common...), styleEnv(t, s.launcher)(r, n, port)...)
					if s.jobToken {
						cmd.Env = append(cmd.Env, "GRUN_TOKEN="+jobToken)
					}
					start(cmd)
				}
			}
			// Every rank's listeners, as /proc/net lists them to any user:
			// one TCP and one shared-memory listener per rank, and the
			// store's (under grun, grun's own, named by GRUN_ADDR).
			var tcp, shm []string
			for end := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
				ranks := ranksOf(cmds)
				if s.launcher == "grun" && len(ranks) > 0 {
					store = environOf(ranks[0], "GRUN_ADDR")
				}
				tcp, shm = listeners(t, ranks)
				tcp = without(tcp, store)
				if len(ranks) == n && len(tcp) == n && len(shm) == n && store != "" {
					break
				}
				if time.Now().After(end) {
					t.Fatalf("after a minute, %d ranks, store %q, TCP listeners %q and shared-memory ones %q; want %d of each", len(ranks), store, tcp, shm, n)
				}
			}
			args := []string{"-store", store}
			for _, a := range tcp {
				args = append(args, "-tcp", a)
			}
			for _, a := range shm {
				args = append(args, "-shm", a)
			}
			out, err := exec.CommandContext(ctx, "runuser", append([]string{"-u", "nobody", "--", "env", "STRANGER_TOKEN=" + s.guess, stranger}, args...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("the stranger: %v\n%s", err, out)
			}
			said := strings.TrimSpace(string(out))
			t.Logf("the stranger:\n%s", said)
			// One line per attempt, each refused as the job's setting says.
			// Without a token the store hangs up on another uid before a
			// word (peercred.ErrOtherUser); the links hold the job's
			// secret, which the stranger has not: auth.ErrDenied.
			wantStore, wantTCP := "hung up", "denied"
			if s.jobToken {
				wantStore = "denied"
			}
			line := regexp.MustCompile(`^(store|tcp|shm) (\S+): (denied|hung up|other|ADMITTED)`)
			lines := strings.Split(said, "\n")
			if len(lines) != 1+len(tcp)+len(shm) {
				t.Fatalf("%d lines from the stranger, want one per attempt (%d)", len(lines), 1+len(tcp)+len(shm))
			}
			for _, l := range lines {
				m := line.FindStringSubmatch(l)
				if m == nil {
					t.Fatalf("the stranger said %q", l)
				}
				if want := map[string]string{"store": wantStore, "tcp": wantTCP, "shm": "hung up"}[m[1]]; m[3] != want {
					t.Errorf("%s %s: %s, want %s", m[1], m[2], m[3], want)
				}
			}
			if err := os.WriteFile(hold, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			var job strings.Builder
			for i, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					t.Errorf("%s: %v:\n%s", cmd.Path, err, outs[i])
				}
				job.WriteString(outs[i].String())
			}
			for r := 0; r < n; r++ {
				if want := fmt.Sprintf("rank %d of %d: ok", r, n); !strings.Contains(job.String(), want) {
					t.Errorf("no %q: the job did not finish after the stranger:\n%s", want, job.String())
				}
			}
			// The job says what it refused and why: each listener's first
			// refusal in full.
			refusals := map[string]int{}
			for _, l := range strings.Split(job.String(), "\n") {
				if strings.Contains(l, "refused a connection") {
					switch {
					case strings.Contains(l, "connection from another user's process"):
						refusals["hung up"]++
					case strings.Contains(l, "wrong job token"):
						refusals["denied"]++
					default:
						refusals["other"]++
					}
				}
			}
			want := map[string]int{"hung up": len(shm)}
			want[wantStore]++
			want[wantTCP] += len(tcp)
			if fmt.Sprint(refusals) != fmt.Sprint(want) {
				t.Errorf("the job logged refusals %v, want %v:\n%s", refusals, want, job.String())
			}
		})
	}
}

// styleEnv is launcherStyles' env for the launcher called name.
func styleEnv(t *testing.T, name string) func(r, size int, port string) []string {
	for _, st := range launcherStyles {
		if st.name == name {
			return st.env
		}
	}
	t.Fatalf("no launcher style %q", name)
	return nil
}

// ranksOf is the collcheck processes among cmds and their descendants
// (grun's children), by pid.
func ranksOf(cmds []*exec.Cmd) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, not ')'.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 {
			parent[pid], _ = strconv.Atoi(f[1])
		}
	}
	top := map[int]bool{}
	for _, c := range cmds {
		top[c.Process.Pid] = true
	}
	var ranks []int
	for pid := range parent {
		for p := pid; p > 1; p = parent[p] {
			if top[p] {
				if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); filepath.Base(exe) == "collcheck" {
					ranks = append(ranks, pid)
				}
				break
			}
		}
	}
	return ranks
}

// environOf is the variable name in process pid's environment.
func environOf(pid int, name string) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	for _, kv := range strings.Split(string(b), "\x00") {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// listeners are the listening IPv4 TCP sockets (host:port) and abstract
// Unix sockets (@name) that the processes pids hold, from each one's
// /proc/PID/net/tcp and /proc/PID/net/unix (its network namespace's),
// matched to the processes by inode.
func listeners(t *testing.T, pids []int) (tcp, unix []string) {
	t.Helper()
	for _, pid := range pids {
		inodes := map[string]bool{}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if ino, ok := strings.CutPrefix(l, "socket:["); ok {
				inodes[strings.TrimSuffix(ino, "]")] = true
			}
		}
		// sl local_address rem_address st ... inode: st 0A is LISTEN, the
		// address hex of the 32-bit word in host (little-endian) order.
		eachLine(t, fmt.Sprintf("/proc/%d/net/tcp", pid), func(f []string) {
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] {
				return
			}
			host, port, _ := strings.Cut(f[1], ":")
			a, err1 := hex.DecodeString(host)
			p, err2 := strconv.ParseUint(port, 16, 16)
			if err1 != nil || err2 != nil || len(a) != 4 {
				t.Fatalf("/proc/%d/net/tcp: %q", pid, f)
			}
			ip := netip.AddrFrom4([4]byte{a[3], a[2], a[1], a[0]})
			tcp = append(tcp, netip.AddrPortFrom(ip, uint16(p)).String())
		})
		// Num RefCount Protocol Flags Type St Inode Path: flags 00010000 is a
		// listening socket.
		eachLine(t, fmt.Sprintf("/proc/%d/net/unix", pid), func(f []string) {
			if len(f) >= 8 && f[3] == "00010000" && inodes[f[6]] && strings.HasPrefix(f[7], "@") {
				unix = append(unix, f[7])
			}
		})
	}
	return tcp, unix
}

// eachLine calls fn with the fields of each line of path but the first.
func eachLine(t *testing.T, path string, fn func([]string)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for first := true; sc.Scan(); first = false {
		if !first {
			fn(strings.Fields(sc.Text()))
		}
	}
}

// without is list without s.
func without(list []string, s string) []string {
	var out []string
	for _, v := range list {
		if v != s {
			out = append(out, v)
		}
	}
	return out
}

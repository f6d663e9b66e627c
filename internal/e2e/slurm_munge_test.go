//go:build linux

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/testmode"
)

// TestSlurmMunge runs the README's Slurm recipe without its GRUN_TOKEN
// on the two-node cluster of TestSlurm (2 nodes x 2 tasks): each rank
// proves itself to rank 0's store with a munge credential bound to its
// connection, and the store hands it the job's secret, which then
// authenticates the links. It shows
//
//   - the job runs, and rank 0's store says (GOCOLL_DEBUG=info) that it
//     admitted the other node's ranks by munge;
//   - while the job holds after Init, a stranger on the login node (a
//     host of the cluster's network that runs none of the job, as the
//     job's own user but with no munge credential) is refused by the
//     store, and by every rank's TCP listener, which it can reach but
//     whose job secret it lacks (auth.ErrDenied both);
//   - with GOCOLL_INSECURE=1 the store admits the stranger too, but every
//     rank's TCP listener still refuses it (auth.ErrDenied);
//   - with munged out of the ranks' reach (GOCOLL_MUNGE_SOCKET naming a
//     socket no munged serves), the other node's ranks are refused, each
//     told in one line to start munged or set GRUN_TOKEN.
func TestSlurmMunge(t *testing.T) {
	testmode.SkipIfQuick(t)
	s := newSlurm(t)
	recipe := tokenlessRecipe(t)
	// The other node's address (rank 0 runs on n1 and serves the store).
	n2 := s.c.hosts[1]
	run := func(t *testing.T, dir, env, args string) (string, int) {
		t.Helper()
		script := "unset GRUN_TOKEN; " + env + strings.Replace(recipe, "--ntasks-per-node 4 ./train", "--ntasks-per-node 2 ./train "+args, 1)
		out, code, _ := s.shell(t, dir, 2*time.Minute, "salloc -N 2 --ntasks-per-node 2 bash -c '"+script+"'")
		return out, code
	}

	// The job holds after Init while a stranger on the login node knocks
	// at the store and at every rank's TCP listener; then it runs its
	// checks. Under munge the store refuses the stranger; with
	// GOCOLL_INSECURE=1 (and munged out of reach) it admits anyone, the
	// stranger included (whose join, as rank 1 of no job, is then refused
	// as another job's), and the stranger's knocks at the links, without
	// the secret, are refused all the same.
	for _, tc := range []struct {
		name, env string
		store     string // how the stranger's store attempt ends
		admitted  string // how rank 0 says it admitted n2's ranks
	}{
		{"admitted by munge, stranger refused", "", "denied", "munge"},
		{"GOCOLL_INSECURE, links refuse the stranger", "GOCOLL_INSECURE=1 GOCOLL_MUNGE_SOCKET=/run/gocoll-no-munged/munge.socket.2 ", "other", `"no check \(GOCOLL_INSECURE\)"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holdAndKnock(t, s, func(dir, args string) (string, int) {
				return run(t, dir, "export GOCOLL_DEBUG=info GOCOLL_TIMEOUT=90s "+tc.env+"; ", args)
			}, tc.store, tc.admitted)
		})
	}

	t.Run("munged unreachable", func(t *testing.T) {
		dir, _ := trainDir(t, "collcheck")
		out, code := run(t, dir, "export GOCOLL_MUNGE_SOCKET=/run/gocoll-no-munged/munge.socket.2 GOCOLL_TIMEOUT=30s SLURM_KILL_BAD_EXIT=1; ", "-light")
		if code == 0 {
			t.Fatalf("munged out of reach: exit 0, want the other node's ranks refused:\n%s", out)
		}
		refused := 0
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "collcheck:") && strings.Contains(l, "did not admit this rank") {
				t.Logf("%s", l)
				refused++
				for _, want := range []string{"from another host (" + n2 + ") without a munge credential", "start munged", "GRUN_TOKEN", "GOCOLL_INSECURE=1", "Did you start munged?"} {
					if !strings.Contains(l, want) {
						t.Errorf("a refused rank's line does not say %q: %s", want, l)
					}
				}
			}
		}
		if refused != 2 {
			t.Fatalf("%d ranks said they were not admitted, want n2's 2:\n%s", refused, out)
		}
		t.Logf("%d of n2's ranks refused, exit %d", refused, code)
	})
}

// tokenlessRecipe is the README's Slurm recipe without its GRUN_TOKEN.
func tokenlessRecipe(t *testing.T) string {
	t.Helper()
	recipe := readmeRecipe(t, "Slurm")
	r := regexp.MustCompile(` GRUN_TOKEN=\$\([^)]*\)`).ReplaceAllString(recipe, "")
	if strings.Contains(r, "GRUN_TOKEN") || !strings.Contains(r, "--ntasks-per-node 4 ./train") {
		t.Fatalf("README's Slurm recipe %q: cannot take its GRUN_TOKEN out", recipe)
	}
	return r
}

// holdAndKnock runs a tokenless job of 4 ranks on the cluster's two
// nodes (run, with the job's dir and collcheck's arguments) that holds
// after Init while a stranger on the login node, the job's own user with
// no munge credential, knocks at rank 0's store and at every rank's TCP
// listener. The store's answer must be store ("denied", "other"), the
// listeners' "denied" (auth.ErrDenied: the stranger lacks the job's
// secret); then the job must finish, rank 0 saying at info that it
// admitted n2's ranks by admitted.
func holdAndKnock(t *testing.T, s *slurm, run func(dir, args string) (string, int), store, admitted string) {
	t.Helper()
	n1, n2 := s.c.hosts[0], s.c.hosts[1]
	dir, train := trainDir(t, "collcheck")
	hold := filepath.Join(dir, "go")
	stranger := filepath.Join(dir, "stranger")
	if out, err := exec.Command("go", "build", "-o", stranger, "github.com/gocoll/gocoll/internal/e2e/testdata/stranger").CombinedOutput(); err != nil {
		t.Fatalf("building the stranger: %v\n%s", err, out)
	}
	type result struct {
		out  string
		code int
	}
	done := make(chan result, 1)
	go func() {
		out, code := run(dir, "-light -hold "+hold)
		done <- result{out, code}
	}()
	// The ranks' TCP listeners, once all 4 have them (they hold
	// after Init).
	var tcp []string
	for end := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var pids []int
		for _, p := range trainPIDs(train) {
			pids = append(pids, p.pid)
		}
		if len(pids) == 4 {
			tcp, _ = listeners(t, pids)
			tcp = without(tcp, n1+":29500") // rank 0's store
			if len(tcp) == 4 {
				break
			}
		}
		select {
		case r := <-done:
			t.Fatalf("the job ended before the stranger knocked: exit %d:\n%s", r.code, r.out)
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("after 90 s, %d ranks with TCP listeners %q; want 4 of each", len(pids), tcp)
		}
	}
	args := []string{"-store", n1 + ":29500"}
	for _, a := range tcp {
		args = append(args, "-tcp", a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := s.cmd(ctx, s.c.launcher, stranger, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("the stranger: %v\n%s", err, out)
	}
	knocks := strings.TrimSpace(string(out))
	t.Logf("the stranger, on the login node:\n%s", knocks)
	lines := strings.Split(knocks, "\n")
	if len(lines) != 1+len(tcp) {
		t.Fatalf("%d lines from the stranger, want one per attempt (%d)", len(lines), 1+len(tcp))
	}
	if !strings.HasPrefix(lines[0], "store "+n1+":29500: "+store) {
		t.Errorf("the stranger's store attempt: %q, want %s", lines[0], store)
	}
	if store == "denied" && !strings.Contains(lines[0], "without a munge credential") {
		t.Errorf("the store's refusal does not say why: %q", lines[0])
	}
	for _, l := range lines[1:] {
		if !regexp.MustCompile(`^tcp \S+: denied`).MatchString(l) {
			t.Errorf("the stranger got %q, want denied (auth.ErrDenied)", l)
		}
	}
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-done
	for _, want := range []string{"rank 0 of 4: ok", "rank 1 of 4: ok", "rank 2 of 4: ok", "rank 3 of 4: ok"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("no %q:", want)
		}
	}
	// Rank 0's store on n1, saying how it admitted n2's ranks.
	said := regexp.MustCompile(`rendezvous: admitting ranks without a job token.* from=` + regexp.QuoteMeta(n2) + ` by=` + admitted)
	if r.code != 0 || !said.MatchString(r.out) {
		t.Fatalf("tokenless job on 2 nodes: exit %d, want 0 and rank 0 saying it admitted %s's ranks by %s:\n%s", r.code, n2, admitted, r.out)
	}
	for _, l := range strings.Split(r.out, "\n") {
		if said.MatchString(l) {
			t.Logf("%s", l)
		}
	}
}

//go:build linux

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/freeport"
	"github.com/gocoll/gocoll/internal/testmode"
)

const torchrunPath, torchrunPkgs = "/usr/bin/torchrun", "python3-torch"

// TestTorchrun runs README's torchrun recipes as written under the real
// torchrun (Debian 12's torch 1.13): --standalone with 4 ranks, and the
// c10d and static rendezvous with two agents of 2 ranks each on this host
// (as two nodes would run them); then a rank SIGKILLed, and the agent
// itself SIGKILLed.
func TestTorchrun(t *testing.T) {
	testmode.SkipIfQuick(t)
	needBinary(t, torchrunPath, torchrunPkgs)
	standalone := readmeRecipe(t, "torchrun --standalone")
	t.Run("standalone", func(t *testing.T) {
		dir, _ := trainDir(t, "collcheck")
		checkOK(t, startRecipe(t, dir, standalone, "NPROC=4"), 4)
	})
	twoAgents := func(t *testing.T, recipe string, env ...string) {
		dir, _ := trainDir(t, "collcheck")
		a := startRecipe(t, dir, recipe, append(env, "K=0")...)
		b := startRecipe(t, dir, recipe, append(env, "K=1")...)
		for k, j := range []*job{a, b} {
			if code := j.wait(t, 2*time.Minute); code != 0 {
				t.Fatalf("agent %d exited %d:\n%s", k, code, j.output())
			}
		}
		// Each agent prints its own ranks' lines; together, all four.
		both := a.output() + b.output()
		for r := 0; r < 4; r++ {
			if want := fmt.Sprintf("rank %d of 4: ok", r); !strings.Contains(both, want) {
				t.Errorf("no %q from either agent:\n%s\n%s", want, a.output(), b.output())
			}
		}
	}
	t.Run("c10d", func(t *testing.T) {
		twoAgents(t, readmeRecipe(t, "torchrun c10d"), "NNODES=2", "NPROC=2", "HEAD=127.0.0.1", "PORT="+freeport.Get(t), "JOB=gocoll-c10d", "TOKEN="+recipeToken)
	})
	t.Run("static", func(t *testing.T) {
		twoAgents(t, readmeRecipe(t, "torchrun static"), "NNODES=2", "NPROC=2", "HEAD=127.0.0.1", "PORT="+freeport.Get(t), "PORT2="+freeport.Get(t), "TOKEN="+recipeToken)
	})
	// Without GRUN_ADDR the static rendezvous's ranks would fight the
	// agent for MASTER_PORT ("address already in use", "read hello:
	// connection reset by peer"); each must fail at once saying what to set.
	t.Run("static without GRUN_ADDR", func(t *testing.T) {
		recipe := readmeRecipe(t, "torchrun static")
		const prefix = "GRUN_ADDR=$HEAD:$PORT2 "
		if !strings.HasPrefix(recipe, prefix) {
			t.Fatalf("the static recipe %q no longer starts with %q", recipe, prefix)
		}
		dir, _ := trainDir(t, "collcheck")
		start := time.Now()
		j := startRecipe(t, dir, strings.TrimPrefix(recipe, prefix), "NNODES=1", "K=0", "NPROC=2", "HEAD=127.0.0.1", "PORT="+freeport.Get(t), "TOKEN="+recipeToken)
		code := j.wait(t, time.Minute)
		out := j.output()
		if code == 0 || strings.Count(out, "TORCHELASTIC_USE_AGENT_STORE=True") < 2 || !strings.Contains(out, "set GRUN_ADDR") {
			t.Fatalf("exit status %d; want both ranks to fail saying to set GRUN_ADDR:\n%s", code, out)
		}
		t.Logf("static rendezvous without GRUN_ADDR: torchrun exited %d after %v", code, time.Since(start).Round(time.Millisecond))
	})
	t.Run("rank killed", func(t *testing.T) {
		dir, train := trainDir(t, "collcheck")
		killRank(t, "torchrun", stopsJob, dir, train, standalone, 4, 2, "NPROC=4")
	})
	t.Run("torchrun killed", func(t *testing.T) {
		dir, train := trainDir(t, "collcheck")
		killLauncher(t, "torchrun", dir, train, standalone, 4, "NPROC=4")
	})
}

// recipeToken is the $TOKEN of the README's recipes for several nodes:
// the secret every node is given alike.
const recipeToken = "0123456789abcdef0123456789abcdef"

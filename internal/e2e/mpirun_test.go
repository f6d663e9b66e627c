//go:build linux

package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gocoll/gocoll/internal/freeport"
	"github.com/gocoll/gocoll/internal/testmode"
)

const mpirunPath, mpirunPkgs = "/usr/bin/mpirun", "openmpi-bin"

// TestOpenMPI runs README's Open MPI recipe as written under the real
// mpirun: 4 ranks on this host, then a rank SIGKILLed, then mpirun itself
// SIGKILLed.
func TestOpenMPI(t *testing.T) {
	testmode.SkipIfQuick(t)
	needBinary(t, mpirunPath, mpirunPkgs)
	recipe := readmeRecipe(t, "Open MPI")
	vars := func(t *testing.T) []string {
		return []string{"NP=4", "HOSTS=localhost:4", "HEAD=127.0.0.1", "PORT=" + freeport.Get(t)}
	}
	t.Run("one host", func(t *testing.T) {
		dir, _ := trainDir(t, "collcheck")
		checkOK(t, startRecipe(t, dir, recipe, vars(t)...), 4)
	})
	// Two hosts, each a network namespace: mpirun runs in the launcher's
	// and starts its daemons in the hosts' through plm_rsh_agent, as it
	// would through ssh; 2 ranks a host, shared memory within, TCP between.
	t.Run("two hosts", func(t *testing.T) {
		c := newCluster(t, 2)
		dir, _ := trainDir(t, "collcheck")
		agent, err := filepath.Abs(filepath.Join("testdata", "netns-ssh"))
		if err != nil {
			t.Fatal(err)
		}
		var m []string
		for _, h := range c.hosts {
			m = append(m, h+"="+c.ns[h])
		}
		// The namespaces are the test's own, so any port is free there.
		j := startRecipe(t, dir, `ip netns exec `+c.launcher+` bash -c "$RECIPE -addrs"`, "RECIPE="+recipe,
			"NP=4", fmt.Sprintf("HOSTS=%s:2,%s:2", c.hosts[0], c.hosts[1]), "HEAD="+c.hosts[0], "PORT=29500",
			"OMPI_MCA_plm_rsh_agent=sh "+agent+" "+strings.Join(m, ","),
			// A remote orted (Open MPI 4.1.4) now and then crashed in
			// hwloc_shmem_topology_write, mapping the topology it shares
			// into a "hole" of its address space that was not free; with
			// none chosen it shares none.
			"OMPI_MCA_rtc_hwloc_vmhole=none")
		checkOK(t, j, 4)
		out := j.output()
		for r := 0; r < 4; r++ {
			host := c.hosts[r/2]
			if !regexp.MustCompile(fmt.Sprintf(`rank %d addrs .*\b%s\b`, r, regexp.QuoteMeta(host))).MatchString(out) {
				t.Errorf("rank %d did not run on %s:\n%s", r, host, out)
			}
		}
	})
	t.Run("rank killed", func(t *testing.T) {
		dir, train := trainDir(t, "collcheck")
		killRank(t, "mpirun", stopsJob, dir, train, recipe, 4, 2, vars(t)...)
	})
	// mpirun ends the job within milliseconds of a rank's death, often
	// before a survivor has printed why it failed. With recovery on it
	// lets them (and then exits 0), so each can be heard naming the dead
	// rank. The recipe's text is the same.
	t.Run("rank killed, recovery on", func(t *testing.T) {
		dir, train := trainDir(t, "collcheck")
		killRank(t, "mpirun", letsLive, dir, train, recipe, 4, 2, append(vars(t), "OMPI_MCA_orte_enable_recovery=1")...)
	})
	t.Run("mpirun killed", func(t *testing.T) {
		dir, train := trainDir(t, "collcheck")
		killLauncher(t, "mpirun", dir, train, recipe, 4, vars(t)...)
	})
}

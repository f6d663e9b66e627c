package e2e

import (
	"testing"
)

const mpirunPath, mpirunPkgs = "/usr/bin/mpirun", "openmpi-bin"

// TestOpenMPI runs README's Open MPI recipe as written under the real
// mpirun: 4 ranks on this host, then a rank SIGKILLed, then mpirun itself
// SIGKILLed.
func TestOpenMPI(t *testing.T) {
	needBinary(t, mpirunPath, mpirunPkgs)
	recipe := readmeRecipe(t, "Open MPI")
	vars := func(t *testing.T) []string {
		return []string{"NP=4", "HOSTS=localhost:4", "HEAD=127.0.0.1", "PORT=" + freePort(t)}
	}
	t.Run("one host", func(t *testing.T) {
		dir, _ := trainDir(t)
		checkOK(t, startRecipe(t, dir, recipe, vars(t)...), 4)
	})
	t.Run("rank killed", func(t *testing.T) {
		dir, train := trainDir(t)
		killRank(t, "mpirun", stopsJob, dir, train, recipe, 4, 2, vars(t)...)
	})
	// mpirun ends the job within milliseconds of a rank's death, often
	// before a survivor has printed why it failed. With recovery on it
	// lets them (and then exits 0), so each can be heard naming the dead
	// rank. The recipe's text is the same.
	t.Run("rank killed, recovery on", func(t *testing.T) {
		dir, train := trainDir(t)
		killRank(t, "mpirun", letsLive, dir, train, recipe, 4, 2, append(vars(t), "OMPI_MCA_orte_enable_recovery=1")...)
	})
	t.Run("mpirun killed", func(t *testing.T) {
		dir, train := trainDir(t)
		killLauncher(t, "mpirun", dir, train, recipe, 4, vars(t)...)
	})
}

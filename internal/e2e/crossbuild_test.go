package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocoll/gocoll/internal/testmode"
)

// TestCrossBuild compiles the whole module, tests included, for the
// systems developers build on besides Linux, as `GOOS=darwin go build
// ./... && go vet ./...` would: a program that imports gocoll must build on
// a Mac or a Windows laptop, though shared memory and RDMA run only on
// Linux and the TCP engine only on Unix (elsewhere they fail with errors
// wrapping ErrUnsupported or rdma.ErrUnavailable). A Linux-only call in a file
// without a _linux suffix or build constraint fails this test with the
// compiler's message.
//
// Nothing is run: with the build cache warm (every run after the first,
// from any clone of the same code) the three systems take a few seconds
// together; with it cold, about 25 s each, compiling the standard library
// and gocoll for them.
func TestCrossBuild(t *testing.T) {
	testmode.SkipIfQuick(t)
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	root, err := filepath.Abs(filepath.Join("..", "..")) // the module root
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []struct{ goos, goarch string }{
		{"darwin", "arm64"},
		{"freebsd", "amd64"},
		{"windows", "amd64"},
	} {
		t.Run(target.goos+"/"+target.goarch, func(t *testing.T) {
			for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
				cmd := exec.Command(goTool, args...)
				cmd.Dir = root
				// Without cgo, as a cross build is anyway: no C cross
				// compiler is needed, and RDMA takes its stub. GOFLAGS
				// from outside (-race, say) could not apply; -trimpath
				// keys the build cache on the code, not on the clone's
				// directory, so that a fresh clone of code built before
				// compiles nothing for these systems.
				cmd.Env = append(os.Environ(), "GOOS="+target.goos, "GOARCH="+target.goarch, "CGO_ENABLED=0", "GOFLAGS=-trimpath")
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("GOOS=%s GOARCH=%s CGO_ENABLED=0 go %s: %v\n%s",
						target.goos, target.goarch, strings.Join(args, " "), err, out)
				}
			}
		})
	}
}

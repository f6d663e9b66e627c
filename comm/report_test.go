package comm_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/comm"
)

// TestStallReportWithoutGrun: with no grun to print it (torchrun, mpirun,
// srun), the lowest rank waiting in the stalled call makes the report:
// one file, naming the call, the ranks in it and the late rank with what
// it last did and its goroutine stacks; when the stalled call is a
// sub-communicator's and the job's is idle, the report is about it.
func TestStallReportWithoutGrun(t *testing.T) {
	t.Parallel() // it mostly waits (timeouts, stall timers): beside the other such tests
	cases := []struct {
		name string
		run  func(ctx context.Context, c *comm.Communicator) error
		says []string
	}{
		{"the job's call", func(ctx context.Context, c *comm.Communicator) error {
			if err := comm.AllReduce(ctx, c, make([]int32, 100), comm.Sum); err != nil {
				return err
			}
			if c.Rank() == 2 {
				lateUntilReport()
			}
			return comm.AllReduce(ctx, c, make([]int32, 100), comm.Sum)
		}, []string{
			"oldest unfinished call: allreduce #2 (algo",
			"in it: ranks 0-1, 3, waiting up to",
			"rank 2 finished allreduce #1 (algo",
			"and has not entered #2",
			"goroutine stacks of rank 2",
		}},
		{"a sub-communicator's call", func(ctx context.Context, c *comm.Communicator) error {
			sub, err := c.Split(ctx, c.Rank()%2, 0)
			if err != nil {
				return err
			}
			defer sub.Close()
			if c.Rank() == 3 {
				lateUntilReport()
			}
			return sub.Barrier(ctx)
		}, []string{
			"oldest unfinished call: barrier #1 (algo dissemination) of split #1 color 1",
			"in it: rank 1, waiting up to",
			"rank 3 (rank 1 of it) has made no call yet and has not entered #1",
			"goroutine stacks of rank 3",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The report goes to the working directory. It is restored
			// by a cleanup registered before local's, so only after the
			// communicators are closed: a late report cannot land in the
			// package's directory.
			wd, _ := os.Getwd()
			dir := t.TempDir()
			if err := os.Chdir(dir); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chdir(wd) })
			cs := local(t, 4, comm.WithTransport("tcp"), comm.WithStall(300*time.Millisecond))
			errs := each(t, cs, tc.run)
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			files, _ := filepath.Glob(filepath.Join(dir, "gocoll-stall-*.txt"))
			if len(files) != 1 {
				t.Fatalf("%d report files, want 1: %v", len(files), files)
			}
			b, _ := os.ReadFile(files[0])
			for _, want := range tc.says {
				if !strings.Contains(string(b), want) {
					t.Errorf("report does not say %q:\n%.1500s", want, b)
				}
			}
		})
	}
}

// lateUntilReport keeps a rank out of its next call until the stall
// report about it is written in the working directory (the file is
// created empty, then written in one go), or for 10 s at most (then the
// test finds no report, or not what it should say).
func lateUntilReport() {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		files, _ := filepath.Glob("gocoll-stall-*.txt")
		for _, f := range files {
			if fi, err := os.Stat(f); err == nil && fi.Size() > 0 {
				return
			}
		}
	}
}

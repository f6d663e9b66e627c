package bootstrap

import (
	"errors"
	"net"
	"strings"
	"testing"
)

// TestJoinRefusesAnotherJob: two jobs started together with one MASTER_PORT
// and no token reach the same store; the second job's ranks, and any rank
// that joins twice, are refused with a message that says so, and the store's
// own job carries on.
func TestJoinRefusesAnotherJob(t *testing.T) {
	tests := []struct {
		name      string
		expect    bool   // the store knows its job (rank 0's), as ServeFor sets
		job       string // the store's job
		size      int
		rank      int // the intruder's
		otherJob  string
		otherSize int
		want      string
	}{
		{"another Slurm step", true, "slurm 812.0", 4, 3, "slurm 813.0", 4, "rank 3 is of another job (job slurm 813.0) than this store's (job slurm 812.0)"},
		{"another mpirun", true, "openmpi 1791819777", 4, 1, "openmpi 1791819778", 4, "another job (job openmpi 1791819778)"},
		{"another torchrun", true, "torchrun a attempt 0", 2, 1, "torchrun b attempt 0", 2, "another job"},
		{"a job of another size, no ids", true, "", 4, 2, "", 2, "rank 2 is of a job of 2 ranks, this store's has 4"},
		{"the same rank twice, no ids", true, "", 4, 3, "", 4, "rank 3 joined already, from 127.0.0.1:"},
		{"the same rank twice, same job", true, "slurm 1.0", 4, 3, "slurm 1.0", 4, "rank 3 joined already"},
		{"grun's store: the first join fixes the job", false, "x", 4, 3, "y", 4, "another job (job y) than this store's (job x)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, testToken)
			if tt.expect {
				s.Expect(tt.job, tt.size)
			}
			ctx := testCtx(t)
			mine := dial(t, s)
			if err := mine.Join(ctx, tt.rank, tt.size, tt.job); err != nil {
				t.Fatalf("the store's own rank %d: %v", tt.rank, err)
			}
			other := dial(t, s)
			err := other.Join(ctx, tt.rank, tt.otherSize, tt.otherJob)
			if !errors.Is(err, ErrJoinRefused) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("intruder's join: %v; want ErrJoinRefused saying %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), "MASTER_PORT or GRUN_TOKEN") && !strings.Contains(err.Error(), "started twice") {
				t.Errorf("error %q does not say what to do", err)
			}
			// The refused client is not a departure of the store's job,
			// and the job's own ranks still join and talk.
			if err := mine.Put(ctx, "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			other.Close()
			if ds, err := mine.Departures(ctx, 0); err != nil || len(ds) != 0 {
				t.Fatalf("departures after a refused join: %v, %v; want none", ds, err)
			}
			if err := dial(t, s).Join(ctx, (tt.rank+1)%tt.size, tt.size, tt.job); err != nil {
				t.Fatalf("the store's own next rank: %v", err)
			}
			if s.Refused() != 1 {
				t.Errorf("Refused() = %d, want 1", s.Refused())
			}
		})
	}
}

// TestServeFor: rank 0 fails at once where it cannot serve the store: an
// address not of this host (MASTER_ADDR names another host), or a port
// another job holds; and a store it serves refuses ranks of another job.
func TestServeFor(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name string
		addr string
		want []string
	}{
		// 198.18.0.0/15 is for tests and on no interface here.
		{"not this host", "198.18.250.1:29500", []string{"198.18.250.1 is not an address of this host", "127.0.0.1", "MASTER_ADDR"}},
		{"port in use", busy.Addr().String(), []string{"is in use by another process", "MASTER_PORT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ServeFor(Config{Rank: 0, Size: 2, Addr: tt.addr, Serve: true, Source: "slurm", Job: "slurm 1.0"})
			if err == nil {
				s.Close()
				t.Fatal("ServeFor succeeded")
			}
			if !errors.Is(err, ErrEnv) {
				t.Errorf("error %v does not wrap ErrEnv", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	s, err := ServeFor(Config{Rank: 0, Size: 2, Addr: "127.0.0.1:0", Serve: true, Source: "slurm", Job: "slurm 1.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := Dial(testCtx(t), s.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Join(testCtx(t), 1, 2, "slurm 2.0"); !errors.Is(err, ErrJoinRefused) {
		t.Fatalf("a rank of another job joined: %v", err)
	}
}

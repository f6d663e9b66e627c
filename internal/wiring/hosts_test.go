//go:build linux

package wiring

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
)

// TestExchangeHostsCPUs checks how crowded the ranks of this machine are
// judged from the CPUs each may run on: ranks bound to a core each are
// not crowded though each sees one CPU, ranks sharing the same cores are,
// and ranks on other machines do not count.
func TestExchangeHostsCPUs(t *testing.T) {
	mine := CPUList()
	if mine == "" {
		t.Fatal("cpuList: the kernel did not report this process's CPUs")
	}
	here := machineID()
	cases := []struct {
		name   string
		others []string // machine, CPUs: of ranks 1, 2, ...
		ranks  int
		cpus   int
		err    bool
	}{
		{"alone", nil, 1, runtime.NumCPU(), false},
		{"a CPU of its own", []string{here + "\n" + "1023"}, 2, runtime.NumCPU() + 1, false},
		{"sharing", []string{here + "\n" + mine, here + "\n" + mine, here + "\n" + mine}, 4, runtime.NumCPU(), false},
		{"other machine", []string{"elsewhere\n" + mine, "elsewhere\n0"}, 1, runtime.NumCPU(), false},
		{"unknown CPUs", []string{here + "\n"}, 2, runtime.NumCPU(), false},
		{"old format", []string{"no cpus field"}, 0, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			token := []byte("hosts-test")
			srv, err := bootstrap.Listen("127.0.0.1:0", token)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			store, err := bootstrap.Dial(ctx, srv.Addr(), token)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			for i, o := range tc.others {
				v := "fake\n\n" + o
				if tc.err {
					v = o
				}
				if err := store.Put(ctx, HostPrefix+strconv.Itoa(i+1), []byte(v)); err != nil {
					t.Fatal(err)
				}
			}
			j, err := exchangeHosts(ctx, store, bootstrap.Config{Rank: 0, Size: 1 + len(tc.others)}, -1, nil)
			if tc.err {
				if !errors.Is(err, collectives.ErrInvalid) {
					t.Fatalf("err = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if j.ranksHere != tc.ranks || j.cpusHere != tc.cpus {
				t.Errorf("ranks here %d on %d CPUs, want %d on %d", j.ranksHere, j.cpusHere, tc.ranks, tc.cpus)
			}
		})
	}
}

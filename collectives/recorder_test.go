package collectives

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/reduce"
)

// TestRecorder: the flight recorder keeps the last calls, oldest first,
// as they were called; its counts stay exact across laps of the ring,
// read while calls run; a Timed one has each call's times and outcome.
// The calls' sizes repeat with a period that does not divide the ring's
// 16 slots (each lap rewrites a slot with another call) or does (each lap
// finds its slot holding the same call but for the number).
func TestRecorder(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		timed  bool
		period int
	}{{false, 3}, {true, 3}, {false, 2}, {true, 2}} {
		timed := tc.timed
		g := NewGroup(&mirror{}, Options{Recorded: 16, Timed: timed})
		if got := g.Records(nil); len(got) != 0 {
			t.Fatalf("records before any call: %v", got)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Add(1)
		go func() { // a reader racing the calls (-race checks it)
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					g.Records(nil)
					g.Counts()
				}
			}
		}()
		before := time.Now()
		const n = 1000
		for i := range n {
			buf := make([]byte, 4*(1+i%tc.period))
			if err := g.AllReduce(ctx, buf, reduce.Float32, reduce.Max); err != nil {
				t.Fatal(err)
			}
			g.Ended(nil)
		}
		if err := g.AllReduce(ctx, make([]byte, 40), reduce.Int32, reduce.Sum); err != nil {
			t.Fatal(err)
		}
		g.Ended(errors.New("pretend it failed"))
		close(stop)
		wg.Wait()
		recs := g.Records(nil)
		if len(recs) != 16 {
			t.Fatalf("timed %v: %d records, want 16", timed, len(recs))
		}
		for i, r := range recs[:15] {
			if want := uint64(n + 1 - 15 + i); r.Seq != want {
				t.Errorf("record %d: call #%d, want #%d", i, r.Seq, want)
			}
			if want := 1 + int(r.Seq-1)%tc.period; r.Count != want {
				t.Errorf("period %d: call #%d has %d elements, want %d", tc.period, r.Seq, r.Count, want)
			}
		}
		last := recs[len(recs)-1]
		if last.Kind != AllReduce || last.Root != -1 || last.Count != 10 || last.DType != reduce.Int32 || last.Bytes() != 40 ||
			last.Op != reduce.Sum || last.Desc() != "allreduce #1001 (algo rd, 10 x int32, sum)" {
			t.Errorf("last record %+v", last)
		}
		if ar := recs[0]; ar.Kind != AllReduce || ar.Op != reduce.Max || ar.Root != -1 {
			t.Errorf("first record %+v", ar)
		}
		if timed {
			if last.Start.Before(before) || last.End.Before(last.Start) || !last.Failed || recs[0].Failed {
				t.Errorf("timed: last %v..%v failed %v; first failed %v", last.Start, last.End, last.Failed, recs[0].Failed)
			}
		} else if !last.Start.IsZero() {
			t.Errorf("untimed recorder has times: %+v", last)
		}
		if after := g.RecordsAfter(995, nil); len(after) != 6 || after[0].Seq != 996 || after[5].Seq != 1001 {
			t.Errorf("RecordsAfter(995): %d records from #%d", len(after), after[0].Seq)
		}
		if after := g.RecordsAfter(0, nil); len(after) != 16 || after[0].Seq != 986 {
			t.Errorf("RecordsAfter(0) of a lapped ring: %d records from #%d, want 16 from #986", len(after), after[0].Seq)
		}
		if after := g.RecordsAfter(1001, nil); len(after) != 0 {
			t.Errorf("RecordsAfter(the latest): %d records", len(after))
		}
		if hs := headers(g.Recent()); len(hs) != recentCalls || hs[0].seq != n+1 || hs[recentCalls-1].seq != n+2-recentCalls {
			t.Errorf("Recent: %d headers, from #%d to #%d; want %d from #%d down", len(hs), hs[0].seq, hs[len(hs)-1].seq, recentCalls, n+1)
		}
		calls, bytes := g.Counts()
		if calls[AllReduce] != n+1 || calls[Broadcast] != 0 {
			t.Errorf("counts: %d allreduces, %d broadcasts; want %d, 0", calls[AllReduce], calls[Broadcast], n+1)
		}
		// 4, 8, ... bytes in turn, then 40.
		want := uint64(40)
		for i := range n {
			want += uint64(4 * (1 + i%tc.period))
		}
		if bytes[AllReduce] != want {
			t.Errorf("bytes: %d, want %d", bytes[AllReduce], want)
		}
	}
}

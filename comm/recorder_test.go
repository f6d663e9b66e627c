package comm_test

import (
	"bufio"
	"context"
	"encoding/json"
	"expvar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/comm"
)

// TestRecords: the flight recorder holds the calls as every rank
// numbered them, with what each was; a running call says whom it waits
// on; Stats counts calls and bytes per kind; PublishStats serves them
// through expvar.
func TestRecords(t *testing.T) {
	cs := local(t, 3, comm.WithTransport("tcp"))
	cs[1].TimeCalls(true)
	each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		if err := comm.AllReduce(ctx, c, make([]float64, 10), comm.Max); err != nil {
			return err
		}
		if err := comm.Broadcast(ctx, c, make([]int32, 7), 2); err != nil {
			return err
		}
		return c.Barrier(ctx)
	})
	recs := cs[1].Records()
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3: %+v", len(recs), recs)
	}
	want := []struct {
		seq         uint64
		kind, typ   string
		op          string
		root, count int
		bytes       int
	}{
		{1, "allreduce", "float64", "max", -1, 10, 80},
		{2, "broadcast", "int32", "", 2, 7, 28},
		{3, "barrier", "", "", -1, 0, 0},
	}
	for i, w := range want {
		r := recs[i]
		if r.Seq != w.seq || r.Kind != w.kind || r.Type != w.typ || r.Op != w.op || r.Root != w.root || r.Count != w.count ||
			r.Bytes != w.bytes || r.Running || r.Failed || r.Rank != 1 || !strings.HasPrefix(r.Call, w.kind+" #") {
			t.Errorf("record %d = %+v, want %+v", i, r, w)
		}
	}
	st := cs[1].Stats()
	if st.Calls["allreduce"] != 1 || st.Bytes["allreduce"] != 80 || st.Calls["broadcast"] != 1 || st.Bytes["broadcast"] != 28 {
		t.Errorf("Stats = %+v", st)
	}
	if st.Time["allreduce"] <= 0 || st.Time["broadcast"] <= 0 || st.Time["barrier"] <= 0 || len(st.Time) != 3 {
		t.Errorf("Stats.Time = %v, want a positive time for each of the three kinds called, and no other", st.Time)
	}
	if st := cs[0].Stats(); len(st.Time) != 0 {
		t.Errorf("Stats.Time = %v without TimeCalls, want none", st.Time)
	}
	if err := cs[1].PublishStats("gocoll_test_rank1"); err != nil {
		t.Fatal(err)
	}
	if err := cs[2].PublishStats("gocoll_test_rank1"); err == nil {
		t.Error("PublishStats under a name in use succeeded")
	}
	var pub struct {
		Calls  map[string]uint64
		Latest []comm.CallRecord
	}
	if err := json.Unmarshal([]byte(expvar.Get("gocoll_test_rank1").String()), &pub); err != nil || pub.Calls["broadcast"] != 1 || len(pub.Latest) != 3 {
		t.Errorf("expvar: %v, %+v", err, pub)
	}

	// A call waiting for a late rank: its record says so.
	done := make(chan error, 2)
	for _, c := range cs[:2] {
		go func() { done <- comm.AllReduce(context.Background(), c, make([]float32, 4), comm.Sum) }()
	}
	deadline := time.Now().Add(5 * time.Second)
	var last comm.CallRecord
	for time.Now().Before(deadline) {
		recs := cs[0].Records()
		last = recs[len(recs)-1]
		if last.Seq == 4 && last.Running && len(last.WaitingOn) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if last.Seq != 4 || !last.Running || !last.Start.Before(time.Now()) || len(last.WaitingOn) == 0 {
		t.Errorf("rank 0's call waiting for rank 2: %+v", last)
	}
	if err := comm.AllReduce(context.Background(), cs[2], make([]float32, 4), comm.Sum); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if r := cs[0].Records(); r[len(r)-1].Running {
		t.Errorf("finished call still running: %+v", r[len(r)-1])
	}
}

// TestTrace: under GOCOLL_TRACE each rank writes its calls, with exact
// times, as JSON lines to its own file, sub-communicators' calls too.
func TestTrace(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("GOCOLL_TRACE", filepath.Join(dir, "trace-%r.jsonl"))
	cs := local(t, 2, comm.WithTransport("tcp"))
	before := time.Now()
	each(t, cs, func(ctx context.Context, c *comm.Communicator) error {
		for range 300 {
			if err := comm.AllReduce(ctx, c, make([]int64, 3), comm.Sum); err != nil {
				return err
			}
		}
		sub, err := c.Split(ctx, 0, 0)
		if err != nil {
			return err
		}
		defer sub.Close()
		return sub.Barrier(ctx)
	})
	closeAll(t, cs) // at once, as separate processes would: the traces are complete after Close
	for r := range 2 {
		f, err := os.Open(filepath.Join(dir, "trace-"+string(rune('0'+r))+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		var all, sub int
		var prev time.Time
		for sc.Scan() {
			var rec struct {
				Rank           int
				Comm           string
				Seq            uint64
				Kind, Type, Op string
				Count, Bytes   int
				StartNs        int64 `json:"start_ns"`
				EndNs          int64 `json:"end_ns"`
			}
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				t.Fatalf("rank %d: %q: %v", r, sc.Text(), err)
			}
			start := time.Unix(0, rec.StartNs)
			if rec.Rank != r || start.Before(before) || rec.EndNs < rec.StartNs {
				t.Errorf("rank %d: record %+v", r, rec)
			}
			if rec.Comm != "" {
				sub++
				continue
			}
			if all++; rec.Seq != uint64(all) || start.Before(prev) {
				t.Errorf("rank %d: call #%d out of order after %d", r, rec.Seq, all-1)
			}
			if all <= 300 && (rec.Kind != "allreduce" || rec.Type != "int64" || rec.Op != "sum" || rec.Count != 3 || rec.Bytes != 24) {
				t.Errorf("rank %d: %s", r, sc.Text())
			}
			prev = start
		}
		// 300 allreduces and the split's allgather; the sub's barrier.
		if all != 301 || sub != 1 {
			t.Errorf("rank %d: %d calls of the job's communicator (want 301), %d of the sub's (want 1)", r, all, sub)
		}
	}
}

//go:build linux

package shm_test

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/conformance"
	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/shm"
	"github.com/gocoll/gocoll/transport/tcp"
)

// twoHosts puts the first half of n ranks on fake host 0, the rest on 1.
func twoHosts(n int) []int {
	hosts := make([]int, n)
	for r := range hosts {
		hosts[r] = r * 2 / n
	}
	return hosts
}

// hybridMesh builds, in this process, what a job over several hosts
// builds: a TCP mesh of all n ranks, a shared-memory mesh per (fake) host,
// and per rank a Hybrid routing between them.
func hybridMesh(t testing.TB, hosts []int) []transport.Transport {
	t.Helper()
	n := len(hosts)
	token := []byte("hybrid-token")
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts := make([]transport.Transport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			store, err := bootstrap.Dial(ctx, srv.Addr(), token)
			if err != nil {
				errs[r] = err
				return
			}
			// The TCP links are made on demand, through the store: it
			// stays open as long as the transports.
			t.Cleanup(func() { store.Close() })
			var local []int
			for q, h := range hosts {
				if h == hosts[r] {
					local = append(local, q)
				}
			}
			far, err := tcp.Connect(ctx, store, r, n, token, tcp.Options{LinkOptions: transport.LinkOptions{Crowded: n > runtime.NumCPU()}})
			if err != nil {
				errs[r] = err
				return
			}
			idx := 0
			for idx < len(local) && local[idx] != r {
				idx++
			}
			near, err := shm.Connect(ctx, store, idx, len(local), token,
				shm.Options{LinkOptions: transport.LinkOptions{Crowded: n > runtime.NumCPU(), Namespace: "host" + strconv.Itoa(hosts[r]) + "/"}})
			if err != nil {
				far.Close()
				errs[r] = err
				return
			}
			ts[r], errs[r] = shm.NewHybrid(near, local, far)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, tr := range ts {
			if tr != nil {
				wg.Add(1)
				go func() { defer wg.Done(); tr.Close() }()
			}
		}
		wg.Wait()
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: connect: %v", r, err)
		}
	}
	return ts
}

// TestConformanceHybrid runs the whole suite over ranks split between two
// fake hosts: every algorithm works through the per-peer routing.
func TestConformanceHybrid(t *testing.T) {
	conformance.RunVariant(t, func(t testing.TB, n int) []transport.Transport { return hybridMesh(t, twoHosts(n)) })
}

// syncBuffer is a log sink shared by the ranks' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestHierarchical runs allreduce with ranks on two and three fake hosts,
// hosts of unequal size included: the hierarchical algorithm must be the
// one chosen (and logged), unless overridden, and every rank must hold the
// exact reduction.
func TestHierarchical(t *testing.T) {
	cases := []struct {
		name  string
		hosts []int
	}{
		{"2x2", []int{0, 0, 1, 1}},
		{"3+2", []int{0, 1, 0, 1, 0}},
		{"1+3", []int{7, 3, 3, 3}},
		{"3+3+2", []int{0, 0, 0, 1, 1, 1, 2, 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := len(tc.hosts)
			ts := hybridMesh(t, tc.hosts)
			for _, algo := range []string{"", "ring"} {
				var logs syncBuffer
				algos, err := collectives.ParseAlgos(algo)
				if err != nil {
					t.Fatal(err)
				}
				groups := make([]*collectives.Group, n)
				for r := range groups {
					logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
					groups[r] = collectives.NewGroup(ts[r], collectives.Options{Hosts: tc.hosts, Algos: algos, Logger: logger})
				}
				for _, count := range []int{0, 1, n + 1, 40_000, 300_007} {
					checkAllReduce(t, groups, count)
				}
				want := "algo=hier"
				if algo != "" {
					want = "algo=" + algo
				}
				if !strings.Contains(logs.String(), want) || algo != "" && strings.Contains(logs.String(), "algo=hier") {
					t.Errorf("GOCOLL_ALGO=%q: log does not show %s alone:\n%s", algo, want, logs.String())
				}
			}
		})
	}
}

func checkAllReduce(t *testing.T, groups []*collectives.Group, count int) {
	t.Helper()
	n := len(groups)
	f32 := make([][]float32, n)
	i32 := make([][]int32, n)
	f64 := make([][]float64, n)
	// bfloat16 sums: 256 on one rank and small integers, which round away
	// next to it in bfloat16, on the others. Their sum is exact in float32,
	// where the partial results are kept, and rounded once.
	bf := make([][]uint16, n)
	bfIn := func(r, i int) float32 {
		if r == i%n {
			return 256
		}
		return float32((r*5+i)%7 - 3)
	}
	for r := range groups {
		f32[r] = make([]float32, count)
		i32[r] = make([]int32, count)
		f64[r] = make([]float64, count)
		bf[r] = make([]uint16, count)
		for i := 0; i < count; i++ {
			f32[r][i] = float32((r*31 + i) % 1000)
			i32[r][i] = int32((r*7919+i*104729)%997 - 500)
			f64[r][i] = float64((r*13+i)%101) / 4
			bf[r][i] = reduce.F32ToBF16(bfIn(r, i))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = g.AllReduce(ctx, asBytes(f32[r]), reduce.Float32, reduce.Sum); errs[r] != nil {
				return
			}
			if errs[r] = g.AllReduce(ctx, asBytes(i32[r]), reduce.Int32, reduce.Max); errs[r] != nil {
				return
			}
			if errs[r] = g.AllReduce(ctx, asBytes(f64[r]), reduce.Float64, reduce.Avg); errs[r] != nil {
				return
			}
			errs[r] = g.AllReduce(ctx, asBytes(bf[r]), reduce.BFloat16, reduce.Sum)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("count %d: rank %d: %v", count, r, err)
		}
	}
	for i := 0; i < count; i++ {
		var sum float32
		var mx int32 = math.MinInt32
		var avg float64
		for q := 0; q < n; q++ {
			sum += float32((q*31 + i) % 1000)
			mx = max(mx, int32((q*7919+i*104729)%997-500))
			avg += float64((q*13+i)%101) / 4
		}
		avg /= float64(n)
		var exact float32
		for q := 0; q < n; q++ {
			exact += bfIn(q, i)
		}
		for r := 0; r < n; r++ {
			if want := reduce.F32ToBF16(exact); bf[r][i] != want {
				t.Fatalf("count %d: rank %d element %d: bfloat16 sum %#04x, want %#04x (%v rounded once)", count, r, i, bf[r][i], want, exact)
			}
			if f32[r][i] != sum || i32[r][i] != mx || math.Abs(f64[r][i]-avg) > 1e-12*avg {
				t.Fatalf("count %d: rank %d element %d: got sum %v max %v avg %v, want %v %v %v",
					count, r, i, f32[r][i], i32[r][i], f64[r][i], sum, mx, avg)
			}
			if f64[r][i] != f64[0][i] {
				t.Fatalf("count %d: ranks %d and 0 disagree at element %d", count, r, i)
			}
		}
	}
}

func asBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// TestHybridLimit: a message to a rank on this host is held to the
// limit every rank shares, MaxMessage, by Send and by SendParts alike,
// and SendParts to a rank on another host goes as TCP sends it, head and
// body arriving as one message.
func TestHybridLimit(t *testing.T) {
	ts := hybridMesh(t, []int{0, 0, 1})
	ctx := context.Background()
	h := ts[0].(*shm.Hybrid)
	big := make([]byte, h.MaxMessage()+1)
	if err := h.Send(ctx, 1, big); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("Send of MaxMessage()+1 bytes to a local rank: %v, want an error saying it exceeds the limit", err)
	}
	if sent, err := h.SendParts(ctx, 1, big[:1], big[1:], false); sent || err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("SendParts of MaxMessage()+1 bytes to a local rank: sent %v, %v; want an error saying it exceeds the limit", sent, err)
	}
	if sent, err := h.SendParts(ctx, 2, []byte{7}, []byte{1}, true); !sent || err != nil {
		t.Fatalf("SendParts to a rank on another host over TCP: sent %v, %v; want it sent", sent, err)
	}
	m, err := ts[2].Recv(ctx, 0)
	if err != nil || !bytes.Equal(m.Data, []byte{7, 1}) {
		t.Fatalf("rank 2 received % x, %v; want 07 01", m.Data, err)
	}
	ts[2].Release(m)
}

// TestHybridSpare: the ranks of an elastic job on one host (a Hybrid of
// shared memory among them and a TCP mesh with room for spare ranks)
// exchange messages with a rank that joins later over TCP alone, a rank
// past Size: the Hybrid routes it to the TCP side, and reports the TCP
// side's Capacity, by which the mux sizes its peers.
func TestHybridSpare(t *testing.T) {
	const n, spare = 2, 2
	token := []byte("hybrid-spare-token")
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func() *bootstrap.Client {
		store, err := bootstrap.Dial(ctx, srv.Addr(), token)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		return store
	}
	o := tcp.Options{LinkOptions: transport.LinkOptions{Crowded: true}, Spare: spare}
	hs := make([]*shm.Hybrid, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		store := dial()
		wg.Add(1)
		go func() {
			defer wg.Done()
			far, err := tcp.Connect(ctx, store, r, n, token, o)
			if err != nil {
				errs[r] = err
				return
			}
			near, err := shm.Connect(ctx, store, r, n, token, shm.Options{LinkOptions: transport.LinkOptions{Crowded: true}})
			if err != nil {
				far.Close()
				errs[r] = err
				return
			}
			hs[r], errs[r] = shm.NewHybrid(near, []int{0, 1}, far)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	defer func() {
		for _, h := range hs {
			h.Close()
		}
	}()
	joiner, err := tcp.Connect(ctx, dial(), n, n, token, o)
	if err != nil {
		t.Fatalf("the spare rank: %v", err)
	}
	defer joiner.Close()
	if c := hs[0].Capacity(); c != n+spare {
		t.Errorf("Capacity = %d, want %d", c, n+spare)
	}
	if hs[0].Local(n) {
		t.Errorf("the spare rank %d is routed through shared memory", n)
	}
	recv := func(tr transport.Transport, from int, want string) {
		t.Helper()
		m, err := tr.Recv(ctx, from)
		if err != nil {
			t.Fatalf("rank %d: recv from %d: %v", tr.Rank(), from, err)
		}
		if string(m.Data) != want || int(m.Peer) != from {
			t.Errorf("rank %d: from %d got %q (peer %d), want %q", tr.Rank(), from, m.Data, m.Peer, want)
		}
		tr.Release(m)
	}
	// The members among themselves, then each with the spare rank, both ways.
	go hs[0].Send(ctx, 1, []byte("near"))
	recv(hs[1], 0, "near")
	for r, h := range hs {
		msg := "to spare from " + strconv.Itoa(r)
		go h.Send(ctx, n, []byte(msg))
		recv(joiner, r, msg)
		back := "from spare to " + strconv.Itoa(r)
		go joiner.Send(ctx, r, []byte(back))
		recv(h, n, back)
	}
}

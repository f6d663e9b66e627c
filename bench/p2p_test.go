package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/conformance"
	"github.com/gocoll/gocoll/transport"
	"github.com/gocoll/gocoll/transport/tcp"
)

// Point-to-point micro-benchmarks of every transport, for benchstat:
//
//	go test -run '^$' -bench 'PingPong|Stream' -count 10 . | tee new.txt    # in bench/
//	benchstat old.txt new.txt
//
// PingPong's ns/op is one round trip (ns/hop: half of it, the one-way
// latency); Stream's MB/s is one direction's bandwidth with every slot of
// the receiver in use. A transport joins by adding its mesh constructor
// to meshes.

// meshes builds, for each transport, n in-process ranks connected through
// a real rendezvous store, as separate processes would be.
var meshes = []struct {
	name string
	mesh func(tb testing.TB, n int) []transport.Transport
}{
	{"tcp", func(tb testing.TB, n int) []transport.Transport {
		return connectMesh(tb, n, func(ctx context.Context, store *bootstrap.Client, rank int, token []byte) (transport.Transport, error) {
			return tcp.Connect(ctx, store, rank, n, token, tcp.Options{LinkOptions: transport.LinkOptions{Crowded: n > runtime.NumCPU()}})
		})
	}},
}

// p2pSizes are the payloads measured: latency-bound to one full slot.
var p2pSizes = []int{8, 1 << 10, 64 << 10, tcp.DefaultSlotSize}

type connectFunc func(ctx context.Context, store *bootstrap.Client, rank int, token []byte) (transport.Transport, error)

func connectMesh(tb testing.TB, n int, connect connectFunc) []transport.Transport {
	tb.Helper()
	token := []byte("collbench-p2p")
	return conformance.Job(tb, n, token, func(ctx context.Context, store *bootstrap.Client, r int) (transport.Transport, error) {
		return connect(ctx, store, r, token)
	})
}

// stamp writes the message number into p's first bytes, so that the
// receiver can tell a lost, repeated or reordered message.
func stamp(p []byte, i int) {
	if len(p) >= 8 {
		binary.LittleEndian.PutUint64(p, uint64(i))
	}
}

func checkStamp(p, want []byte, i int) error {
	if len(p) != len(want) {
		return fmt.Errorf("message %d: %d bytes, want %d", i, len(p), len(want))
	}
	w := append([]byte(nil), want...)
	stamp(w, i)
	if !bytes.Equal(p, w) {
		return fmt.Errorf("message %d: payload differs from what was sent", i)
	}
	return nil
}

// pingPong sends payload from a to b and back, rounds times. With check,
// each message carries its round number and is compared with the sent one.
func pingPong(ctx context.Context, a, b transport.Transport, payload []byte, rounds int, check bool) error {
	echo := make(chan error, 1)
	go func() {
		echo <- func() error {
			for i := 0; i < rounds; i++ {
				m, err := b.Recv(ctx, a.Rank())
				if err != nil {
					return err
				}
				err = b.Send(ctx, a.Rank(), m.Data)
				b.Release(m)
				if err != nil {
					return err
				}
			}
			return nil
		}()
	}()
	err := func() error {
		for i := 0; i < rounds; i++ {
			if check {
				stamp(payload, i)
			}
			if err := a.Send(ctx, b.Rank(), payload); err != nil {
				return err
			}
			m, err := a.Recv(ctx, b.Rank())
			if err != nil {
				return err
			}
			if check {
				err = checkStamp(m.Data, payload, i)
			}
			a.Release(m)
			if err != nil {
				return err
			}
		}
		return nil
	}()
	return errors.Join(err, <-echo)
}

// stream sends count messages of payload from a to b as fast as b takes
// them.
func stream(ctx context.Context, a, b transport.Transport, payload []byte, count int, check bool) error {
	got := make(chan error, 1)
	want := append([]byte(nil), payload...)
	go func() {
		got <- func() error {
			for i := 0; i < count; i++ {
				m, err := b.Recv(ctx, a.Rank())
				if err != nil {
					return err
				}
				if check {
					err = checkStamp(m.Data, want, i)
				}
				b.Release(m)
				if err != nil {
					return err
				}
			}
			return nil
		}()
	}()
	var err error
	for i := 0; i < count && err == nil; i++ {
		if check {
			stamp(payload, i)
		}
		err = a.Send(ctx, b.Rank(), payload)
	}
	return errors.Join(err, <-got)
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

func pattern(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + 3)
	}
	return p
}

func BenchmarkPingPong(b *testing.B) {
	for _, m := range meshes {
		b.Run(m.name, func(b *testing.B) {
			ts := m.mesh(b, 2)
			for _, size := range p2pSizes {
				size = min(size, ts[0].MaxMessage())
				b.Run(sizeName(size), func(b *testing.B) {
					payload := pattern(size)
					ctx := context.Background()
					if err := pingPong(ctx, ts[0], ts[1], payload, 10, false); err != nil {
						b.Fatal(err)
					}
					b.SetBytes(int64(2 * size))
					b.ResetTimer()
					if err := pingPong(ctx, ts[0], ts[1], payload, b.N, false); err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/hop")
				})
			}
		})
	}
}

func BenchmarkStream(b *testing.B) {
	for _, m := range meshes {
		b.Run(m.name, func(b *testing.B) {
			ts := m.mesh(b, 2)
			for _, size := range p2pSizes[1:] {
				size = min(size, ts[0].MaxMessage())
				b.Run(sizeName(size), func(b *testing.B) {
					payload := pattern(size)
					ctx := context.Background()
					b.SetBytes(int64(size))
					b.ResetTimer()
					if err := stream(ctx, ts[0], ts[1], payload, b.N, false); err != nil {
						b.Fatal(err)
					}
				})
			}
		})
	}
}

// TestP2PHelpers runs the benchmarks' loops with every message checked,
// so that a benchmark never times a transport that delivers wrong bytes.
func TestP2PHelpers(t *testing.T) {
	for _, m := range meshes {
		t.Run(m.name, func(t *testing.T) {
			ts := m.mesh(t, 2)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, size := range append([]int{0}, p2pSizes...) {
				size = min(size, ts[0].MaxMessage())
				if err := pingPong(ctx, ts[0], ts[1], pattern(size), 20, true); err != nil {
					t.Fatalf("pingpong %s: %v", sizeName(size), err)
				}
				if err := pingPong(ctx, ts[1], ts[0], pattern(size), 5, true); err != nil {
					t.Fatalf("pingpong back %s: %v", sizeName(size), err)
				}
				if err := stream(ctx, ts[0], ts[1], pattern(size), 50, true); err != nil {
					t.Fatalf("stream %s: %v", sizeName(size), err)
				}
			}
		})
	}
}

// TestCheckStampCatchesCorruption: the check the helpers rely on fails on
// a wrong byte and on a wrong message number.
func TestCheckStampCatchesCorruption(t *testing.T) {
	p := pattern(64)
	sent := append([]byte(nil), p...)
	stamp(sent, 3)
	if err := checkStamp(sent, p, 3); err != nil {
		t.Fatalf("a faithful copy: %v", err)
	}
	if err := checkStamp(sent, p, 4); err == nil {
		t.Fatal("message 3 passed as message 4")
	}
	sent[40] ^= 1
	if err := checkStamp(sent, p, 3); err == nil {
		t.Fatal("a flipped bit passed")
	}
	if err := checkStamp(sent[:10], p, 3); err == nil {
		t.Fatal("a short message passed")
	}
}

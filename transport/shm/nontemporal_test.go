//go:build linux

package shm

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/transport"
	"unsafe"
)

// TestStreamCopy copies with non-temporal stores at every alignment of
// the destination and the source, at lengths around the 64-byte lines:
// every byte must arrive, and nothing beside the destination change.
func TestStreamCopy(t *testing.T) {
	lengths := []int{0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 200, 4095, 4096, 4097, 65536 + 13}
	const guard = 128
	for _, n := range lengths {
		for dOff := 0; dOff < 64; dOff += 7 {
			for sOff := 0; sOff < 16; sOff += 5 {
				src := make([]byte, sOff+n)
				for i := range src {
					src[i] = byte(i*13 + n + 1)
				}
				// A 64-byte-aligned arena, so that dOff is the
				// destination's offset from a line.
				arena := make([]byte, guard+dOff+n+guard+64)
				base := (64 - int(uintptr(sliceAddr(arena))&63)) & 63
				for i := range arena {
					arena[i] = 0xA5
				}
				dst := arena[base+guard+dOff : base+guard+dOff+n]
				streamCopy(dst, src[sOff:])
				if !bytes.Equal(dst, src[sOff:]) {
					t.Fatalf("n=%d dst+%d src+%d: the copy differs from the source", n, dOff, sOff)
				}
				for i, b := range arena {
					if (i < base+guard+dOff || i >= base+guard+dOff+n) && b != 0xA5 {
						t.Fatalf("n=%d dst+%d src+%d: byte %d outside the destination changed", n, dOff, sOff, i-(base+guard+dOff))
					}
				}
			}
		}
	}
}

// TestNonTemporalBodies sends messages on both sides of the
// non-temporal floor through real rings, after heads of every placement,
// with each way of writing long bodies, and checks every byte that
// arrives; measuring (auto) has by then written long bodies both ways.
func TestNonTemporalBodies(t *testing.T) {
	for _, mode := range []NonTemporal{NonTemporalAuto, NonTemporalOn, NonTemporalOff} {
		t.Run(mode.String(), func(t *testing.T) {
			ts := pairWith(t, Options{LinkOptions: transport.LinkOptions{Slots: 2, SlotSize: 16 << 10}, NonTemporal: mode})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			max := ts[0].MaxMessage()
			for i, tt := range []struct{ head, body int }{
				{0, 1}, {32, 24}, {32, inlineMax - 32}, {32, inlineMax - 31}, {16, 1000},
				{48, nonTemporalMin - 1}, {63, nonTemporalMin}, {0, max}, {32, max - 32}, {100, max - 100}, {16, max - 16}, {0, nonTemporalMin + 1},
				// Enough within memory already written for auto to time both ways.
				{32, 8 << 10}, {32, 8 << 10}, {32, 8 << 10}, {32, 8 << 10}, {32, 8 << 10}, {32, 8 << 10}, {32, 8 << 10}, {32, 8 << 10},
				{32, 8 << 10}, {32, 8 << 10}, {32, 8 << 10}, {32, 8 << 10}, {32, 8 << 10}, {32, 8 << 10}, {32, 8 << 10}, {32, 8 << 10},
			} {
				want := make([]byte, tt.head+tt.body)
				for j := range want {
					want[j] = byte(i*29 + j*11 + 3)
				}
				if sent, err := ts[0].SendParts(ctx, 1, want[:tt.head], want[tt.head:], true); !sent || err != nil {
					t.Fatalf("head %d, body %d: SendParts: sent %v, %v", tt.head, tt.body, sent, err)
				}
				m, err := ts[1].Recv(ctx, 0)
				if err != nil {
					t.Fatalf("head %d, body %d: Recv: %v", tt.head, tt.body, err)
				}
				if !bytes.Equal(m.Data, want) {
					t.Fatalf("head %d, body %d: received %d bytes that differ from the %d sent", tt.head, tt.body, len(m.Data), len(want))
				}
				ts[1].Release(m)
			}
			// The receiver judged every message the sender timed, and
			// auto timed both ways.
			sent, judged := ts[0].lookup(1).sender.timed, ts[1].lookup(0).judge.count
			if auto := mode.Here() == NonTemporalAuto; sent != judged || auto != (sent[0] >= judgeFirst && sent[1] >= judgeFirst) || !auto && sent != [2]int{} {
				t.Errorf("%v: timed (ordinary, non-temporal) %v sent and %v judged", mode, sent, judged)
			}
		})
	}
}

// TestStoreJudge feeds a receiver's judge the costs of the messages its
// sender times, as plan schedules them, and checks the stores it then
// asks for: the cheaper once both are measured, not flapping between two
// near costs, unmoved by a few outliers, and back when the costs turn.
func TestStoreJudge(t *testing.T) {
	type phase struct {
		from    int     // long messages sent before the phase
		ord, nt float64 // ns per byte of each way in the phase
		wantNT  bool    // asked for at its end
	}
	tests := []struct {
		name     string
		phases   []phase
		outliers bool // every 7th timed message costs 50x
	}{
		{"cores apart: non-temporal", []phase{{0, 0.20, 0.08, true}}, false},
		{"cores sharing a cache: ordinary", []phase{{0, 0.025, 0.05, false}}, false},
		{"near costs: no flapping", []phase{{0, 0.10, 0.095, false}}, false},
		{"non-temporal 15% cheaper: ordinary stays", []phase{{0, 0.10, 0.085, false}}, false},
		{"ordinary 10% cheaper: back to it", []phase{{0, 0.20, 0.08, true}, {2000, 0.09, 0.10, false}}, false},
		{"outliers", []phase{{0, 0.025, 0.05, false}}, true},
		{"placement changes", []phase{{0, 0.025, 0.05, false}, {1000, 0.20, 0.08, true}, {3000, 0.025, 0.05, false}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, j := storeSender{mode: NonTemporalAuto}, storeJudge{}
			const slots = 8
			flips, timed := 0, 0
			seq := uint64(0)
			for i, ph := range tt.phases {
				end := 5000
				if i+1 < len(tt.phases) {
					end = tt.phases[i+1].from
				}
				for k := ph.from; k < end; k++ {
					nt, isTimed := s.plan(j.asks, seq%slots, slots, 64<<10)
					seq++
					if !isTimed {
						continue
					}
					timed++
					c := ph.ord
					if nt {
						c = ph.nt
					}
					if tt.outliers && timed%7 == 0 {
						c *= 50
					}
					was := j.asks
					j.record(nt, c)
					if j.asks != was {
						flips++
					}
				}
				if j.asks != ph.wantNT {
					t.Errorf("phase %d: non-temporal asked %v, want %v (medians %.3f, %.3f)", i, j.asks, ph.wantNT, j.median(0), j.median(1))
				}
			}
			if flips > len(tt.phases) {
				t.Errorf("the ask flipped %d times over %d phases", flips, len(tt.phases))
			}
			if max := 5000/timeEvery + (5000/exploreEvery+2)*burstTimed; timed > max {
				t.Errorf("%d of 5000 long messages timed, want at most %d", timed, max)
			}
		})
	}
	t.Run("fresh memory", func(t *testing.T) {
		// Messages that reach further into their slot than any before
		// fault pages in: never timed.
		s := storeSender{mode: NonTemporalAuto}
		for k := range 64 {
			if _, timed := s.plan(true, uint64(k%8), 8, 4096+k*512); timed {
				t.Fatalf("message %d, reaching further, was timed", k)
			}
		}
		timed := 0
		for k := range 64 {
			if _, ok := s.plan(true, uint64(k%8), 8, 4096); ok {
				timed++
			}
		}
		if timed == 0 {
			t.Errorf("of 64 messages within memory written before, none was timed")
		}
	})
	t.Run("bursts", func(t *testing.T) {
		// Each way is tried for a lap of the ring before it is timed,
		// ordinary first, then non-temporal, then the way not asked for.
		s := storeSender{mode: NonTemporalAuto}
		const slots = 8
		var got []string
		for k := range 2*(slots+burstTimed) + exploreEvery + slots + burstTimed {
			nt, timed := s.plan(false, uint64(k%slots), slots, 8192)
			if k < slots {
				continue // fresh memory
			}
			if timed {
				got = append(got, fmt.Sprintf("%d:%v", k, nt))
			}
		}
		// The first burst's lap is the fresh one; its timed messages
		// are 8-10, the second burst's 19-21 (after 11-18), then one in
		// 8 the way asked, and a burst the other way.
		want := []string{"8:false", "9:false", "10:false", "19:true", "20:true", "21:true"}
		if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
			t.Errorf("timed messages %v, want %v first", got, want)
		}
		var later []string
		for _, g := range got[len(want):] {
			if strings.HasSuffix(g, ":true") {
				later = append(later, g)
			}
		}
		if len(later) != burstTimed {
			t.Errorf("after the first bursts, %v timed with non-temporal stores (not asked for), want %d in one burst", later, burstTimed)
		}
	})
	for _, mode := range []NonTemporal{NonTemporalOn, NonTemporalOff} {
		s := storeSender{mode: mode}
		for seq := range uint64(100) {
			if nt, timed := s.plan(mode == NonTemporalOff, seq%8, 8, 8192); nt != (mode == NonTemporalOn) || timed {
				t.Fatalf("%v: plan says non-temporal %v, timed %v", mode, nt, timed)
			}
		}
	}
}

func sliceAddr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// TestJudgeConcurrentReleases has the receiver hold several long
// messages at once and release them from other goroutines, in any order,
// while Recv arms the judge with the timed ones: under -race, nothing
// may be read that another goroutine writes unordered, and the judge
// must still have judged, and every byte arrived.
func TestJudgeConcurrentReleases(t *testing.T) {
	ts := pairWith(t, Options{LinkOptions: transport.LinkOptions{Slots: 8, SlotSize: 16 << 10}, NonTemporal: NonTemporalAuto})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const msgs = 400
	body := make([]byte, 8<<10)
	go func() {
		for i := range msgs {
			body[0] = byte(i)
			if err := ts[0].Send(ctx, 1, body); err != nil {
				t.Errorf("Send %d: %v", i, err)
				return
			}
		}
	}()
	held := make(chan transport.Message, 4)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range held {
				ts[1].Release(m)
			}
		}()
	}
	for i := range msgs {
		m, err := ts[1].Recv(ctx, 0)
		if err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
		if len(m.Data) != len(body) || m.Data[0] != byte(i) {
			t.Fatalf("message %d: %d bytes starting %d", i, len(m.Data), m.Data[0])
		}
		held <- m
	}
	close(held)
	wg.Wait()
	if j := &ts[1].lookup(0).judge; j.count[0]+j.count[1] == 0 {
		t.Errorf("no message judged of %d timed by the sender", ts[0].lookup(1).sender.timed)
	}
}

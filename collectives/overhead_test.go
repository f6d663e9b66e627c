package collectives

import (
	"context"
	"testing"

	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport"
)

// mirror is a two-rank transport with one goroutine behind it: rank 0's
// send to rank 1 comes back as rank 1's next message to rank 0. Over it a
// collective costs only its own instructions, with no other core and no
// wait in the time, so the layers' overheads can be measured alone; the
// latency between two processes is that plus the memory system's.
type mirror struct {
	slot []byte // made at the first send, MaxMessage bytes
	size int    // MaxMessage; 0: 4 KiB
	n    int
	full bool // a message is waiting
	sent int  // messages sent
}

func (m *mirror) Rank() int { return 0 }
func (m *mirror) Size() int { return 2 }
func (m *mirror) MaxMessage() int {
	if m.size == 0 {
		return 1 << 12
	}
	return m.size
}

func (m *mirror) buf() []byte {
	if m.slot == nil {
		m.slot = make([]byte, m.MaxMessage())
	}
	return m.slot
}
func (m *mirror) Close() error { return nil }

func (m *mirror) Send(_ context.Context, _ int, p []byte) error {
	m.n, m.full = copy(m.buf(), p), true
	m.sent++
	return nil
}

// SendParts lets the mux send without its copy, as over shared memory.
func (m *mirror) SendParts(_ context.Context, _ int, head, body []byte, _ bool) (bool, error) {
	if m.full {
		return false, nil
	}
	b := m.buf()
	m.n = copy(b[copy(b, head):], body) + len(head)
	m.full = true
	m.sent++
	return true, nil
}

// HasCredit lets the mux send without reading ahead (see
// transport.CreditReporter); without it the mux would drain Recv, which
// here never waits, into its queues.
func (m *mirror) HasCredit(int) bool { return !m.full }

func (m *mirror) Recv(_ context.Context, peer int) (transport.Message, error) {
	m.full = false
	return transport.Message{Data: m.slot[:m.n], Peer: int32(peer)}, nil
}

func (m *mirror) Release(transport.Message) {}

// BenchmarkOverhead is the CPU time of one 8-byte float32 allreduce on two
// ranks (recursive doubling, one message each way) through each layer
// above the transport: the mux alone (a send, a receive and a release),
// the collectives layer on the bare transport, and both, as a communicator
// runs them.
func BenchmarkOverhead(b *testing.B) {
	ctx := context.Background()
	b.Run("mux", func(b *testing.B) {
		ch, err := NewMux(&mirror{}, 0).Channel(0, []int{0, 1})
		if err != nil {
			b.Fatal(err)
		}
		msg := make([]byte, hdrLen+8)
		for i := 0; i < b.N; i++ {
			if err := ch.Send(ctx, 1, msg); err != nil {
				b.Fatal(err)
			}
			m, err := ch.Recv(ctx, 1)
			if err != nil {
				b.Fatal(err)
			}
			ch.Release(m)
		}
	})
	for _, tc := range []struct {
		name string
		t    func() transport.Transport
	}{
		{"group", func() transport.Transport { return &mirror{} }},
		{"group+mux", func() transport.Transport {
			ch, err := NewMux(&mirror{}, 0).Channel(0, []int{0, 1})
			if err != nil {
				b.Fatal(err)
			}
			return ch
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			g := NewGroup(tc.t(), Options{})
			buf := make([]byte, 8)
			for i := 0; i < b.N; i++ {
				if err := g.AllReduce(ctx, buf, reduce.Float32, reduce.Sum); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestMirror checks that the benchmark's transport runs the collective it
// times: an allreduce with a rank holding the same data doubles it.
func TestMirror(t *testing.T) {
	g := NewGroup(&mirror{}, Options{})
	buf := []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40} // float32 1, 2
	if err := g.AllReduce(context.Background(), buf, reduce.Float32, reduce.Sum); err != nil {
		t.Fatal(err)
	}
	if want := []byte{0, 0, 0, 0x40, 0, 0, 0x80, 0x40}; string(buf) != string(want) { // 2, 4
		t.Fatalf("allreduce over the mirror gave % x, want % x", buf, want)
	}
}

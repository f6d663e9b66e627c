package mesh

import (
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/transport"
)

func TestSpin(t *testing.T) {
	for _, c := range []struct {
		spin    time.Duration
		crowded bool
		want    time.Duration
	}{
		{0, false, DefaultSpin},
		{0, true, CrowdedSpin},
		{-1, false, 0},
		{-time.Second, true, 0},
		{5 * time.Microsecond, false, 5 * time.Microsecond},
		{5 * time.Microsecond, true, 5 * time.Microsecond},
	} {
		if got := Spin(c.spin, c.crowded); got != c.want {
			t.Errorf("Spin(%v, crowded=%v) = %v, want %v", c.spin, c.crowded, got, c.want)
		}
	}
}

// TestTurnEvery: a wait's own period of scheduler turns stands unless
// the process has a single P, where it is at most SolePolls (and a wait
// that gave none gives them every SolePolls polls).
func TestTurnEvery(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range []struct {
		procs, every, want int
	}{
		{2, 0, 0},
		{2, 64, 64},
		{2, 1024, 1024},
		{1, 0, SolePolls},
		{1, 64, 64},
		{1, SolePolls, SolePolls},
		{1, 1024, SolePolls},
	} {
		runtime.GOMAXPROCS(c.procs)
		if got := TurnEvery(c.every); got != c.want {
			t.Errorf("GOMAXPROCS=%d: TurnEvery(%d) = %d, want %d", c.procs, c.every, got, c.want)
		}
	}
}

func TestRingsFill(t *testing.T) {
	r := Rings{Slots: 8, MaxSlots: 64, SlotSize: 256 << 10, MaxSlotSize: 16 << 20}
	for _, c := range []struct {
		slots, size         int
		wantSlots, wantSize int
		wantErr             string
	}{
		{0, 0, 8, 256 << 10, ""},
		{2, 4 << 10, 2, 4 << 10, ""},
		{64, 16 << 20, 64, 16 << 20, ""},
		{1, 0, 0, 0, "x: 1 slots per peer, want 2..64"},
		{65, 0, 0, 0, "x: 65 slots per peer, want 2..64"},
		{-3, 0, 0, 0, "x: -3 slots per peer"},
		{0, 4<<10 - 64, 0, 0, "x: slot size 4032, want a multiple of 64 in [4 KiB, 16 MiB]"},
		{0, 16<<20 + 64, 0, 0, "x: slot size 16777280"},
		{0, 4<<10 + 1, 0, 0, "x: slot size 4097"},
		{0, -64, 0, 0, "x: slot size -64"},
	} {
		o := transport.LinkOptions{Slots: c.slots, SlotSize: c.size}
		err := r.Fill("x", &o, false)
		slots, size := o.Slots, o.SlotSize
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("Fill(%d, %d): %v", c.slots, c.size, err)
		case c.wantErr == "" && (slots != c.wantSlots || size != c.wantSize):
			t.Errorf("Fill(%d, %d) = %d, %d, want %d, %d", c.slots, c.size, slots, size, c.wantSlots, c.wantSize)
		case c.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), c.wantErr)):
			t.Errorf("Fill(%d, %d) = %v, want an error starting %q", c.slots, c.size, err, c.wantErr)
		}
	}
}

func TestListenHost(t *testing.T) {
	if got := ListenHost("10.1.2.3", nil); got != "10.1.2.3" {
		t.Errorf("explicit host: %q", got)
	}
	if got := ListenHost("", struct{}{}); got != "127.0.0.1" {
		t.Errorf("no store address: %q, want loopback", got)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := ListenHost("", c); got != "127.0.0.1" {
		t.Errorf("store reached over loopback: %q", got)
	}
}

// TestWaits: the budget falls to LongWaitSpin once waits run longer than
// it, comes back once they are short again, and is never raised above
// the full budget nor kept below it by one stray long wait.
func TestWaits(t *testing.T) {
	const full = time.Millisecond
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	for _, c := range []struct {
		name  string
		waits []time.Duration // in order
		want  time.Duration   // the next wait's budget
	}{
		{"fresh", nil, full},
		{"short waits", []time.Duration{ms(0.01), ms(0.02), ms(0.01)}, full},
		{"one long wait among short ones", []time.Duration{ms(0.01), ms(0.01), ms(3), ms(0.01)}, full},
		{"link-paced waits", []time.Duration{ms(4), ms(4), ms(4.5)}, LongWaitSpin},
		{"waits just over the budget", []time.Duration{ms(1.5), ms(1.5), ms(1.5), ms(1.5), ms(1.5)}, LongWaitSpin},
		{"short again after long ones", []time.Duration{ms(4), ms(4), ms(4), ms(0.07), ms(0.07), ms(0.07), ms(0.07), ms(0.07), ms(0.07)}, full},
	} {
		t.Run(c.name, func(t *testing.T) {
			var w Waits
			for _, d := range c.waits {
				w.Done(d)
			}
			if got := w.Spin(full); got != c.want {
				t.Errorf("after waits %v: Spin(%v) = %v, want %v", c.waits, full, got, c.want)
			}
		})
	}
	var w Waits
	w.Done(time.Second)
	if got := w.Spin(5 * time.Microsecond); got != 5*time.Microsecond {
		t.Errorf("a full budget below LongWaitSpin: Spin = %v, want it kept", got)
	}
	if got := w.Spin(0); got != 0 {
		t.Errorf("no spinning at all: Spin(0) = %v, want 0", got)
	}
}

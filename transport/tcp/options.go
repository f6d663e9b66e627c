package tcp

import (
	"fmt"
	"time"

	"github.com/gocoll/gocoll/internal/mesh"
	"github.com/gocoll/gocoll/transport"
)

// Options tune the mesh. The zero value picks the defaults: 4 slots of
// 512 KiB (and transport.Headroom) per peer (at most 4096 slots of 64 MiB), links made on demand.
// A crowded rank keeps the full spin (see LinkOptions.Crowded).
type Options struct {
	transport.LinkOptions
	// ListenHost is the address to listen on. Default: the local address
	// this process uses to reach the store, which is the one peers reach.
	ListenHost string
	// CloseLinger bounds how long Close waits for peers to close their ends
	// in order, so that no data in flight is cut off by a reset.
	CloseLinger time.Duration
	// Warm lists peers to link at Connect, all at once, when not Eager:
	// the partners of the algorithms the job will run first (a
	// communicator warms those of the small-message allreduce and the
	// ring), so that the first collective finds its links ready instead
	// of making them one round at a time, and a peer that cannot be
	// reached fails Connect. Ranks out of range are refused.
	Warm []int
	// SilentPeer is how long a peer's host may stay silent (data sent but
	// not acknowledged, or keepalive probes unanswered on an idle link)
	// before the peer is declared lost: the host crashed, lost power or
	// dropped off the network, and no reset will ever come. The kernel
	// does the probing (TCP keepalive and TCP_USER_TIMEOUT), so a rank
	// busy computing for an hour is not mistaken for a dead one, and
	// neither is a stopped process, whose kernel still answers. Default
	// DefaultSilentPeer; negative: never (the kernel's own retransmission
	// limit, about 15 minutes).
	SilentPeer time.Duration
	// Spare is how many job ranks past size may link to this rank, or
	// be linked to: ranks size, size+1, ... size+Spare-1, replacements
	// that join a running elastic job (comm's Grow). Every rank of a job
	// must pass the same Spare. Capacity reports size + Spare. Links to
	// them are made on demand as to any rank, so Spare needs the lazy
	// mode (not Eager, whose listener closes once the first ranks are
	// linked).
	Spare int
	// Encrypt seals every frame with AES-256-GCM under keys derived from
	// the job token (which must not be empty), fresh for each connection
	// and each direction (see encrypt.go). Every rank must set the same:
	// a link between a rank that encrypts and one that does not is
	// refused at its handshake (ErrEncryptMismatch). GOCOLL_ENCRYPT=1
	// sets it for a communicator.
	Encrypt bool
}

// The slot geometry of a zero Options, and the most it may ask for.
const (
	DefaultSlots    = 4
	DefaultSlotSize = 512<<10 + transport.Headroom
	// MaxSlotSize bounds what a peer may ask us to believe about lengths.
	MaxSlotSize = 64 << 20
)

func (o *Options) fill() error {
	// A crowded rank yields its CPU between polls (drive), so the peer it
	// waits for runs meanwhile: its spin need not be cut short as the
	// other transports' is. Four ranks on 2 cores, 8 B-32 KiB: 1.2-1.4x
	// the busbw of a 20 µs spin (bench/ab, 9 rounds alternating).
	rings := mesh.Rings{Slots: DefaultSlots, MaxSlots: 1 << 12, SlotSize: DefaultSlotSize, MaxSlotSize: MaxSlotSize}
	if err := rings.Fill("tcp", &o.LinkOptions, false); err != nil {
		return err
	}
	if o.CloseLinger == 0 {
		o.CloseLinger = 2 * time.Second
	}
	if o.SilentPeer == 0 {
		o.SilentPeer = DefaultSilentPeer
	}
	if o.SilentPeer > 0 && o.SilentPeer < 2*time.Second {
		return fmt.Errorf("tcp: SilentPeer %v, want at least 2s (keepalive probes go at whole seconds)", o.SilentPeer)
	}
	return nil
}

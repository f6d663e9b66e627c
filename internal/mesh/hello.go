package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/gocoll/gocoll/transport"
)

// ErrProtocol is wrapped by the errors of a peer that broke a link's
// protocol: a bad hello or verdict, a peer of another communicator.
var ErrProtocol = errors.New("protocol violation")

// Hello is what every transport's hello says alike: the rank saying
// it, the job's size and the slot geometry, as four little-endian words
// after a 4-byte magic, and the hash of the namespace, a little-endian
// uint64 where the transport's HelloLayout puts it. The rest of a hello
// is the transport's own.
type Hello struct {
	Rank, Size, Slots, SlotSize uint32
	Namespace                   uint64
}

// NewHello is what rank of a job of size says under o.
func NewHello(rank, size int, o transport.LinkOptions) Hello {
	h := fnv.New64a()
	h.Write([]byte(o.Namespace))
	return Hello{uint32(rank), uint32(size), uint32(o.Slots), uint32(o.SlotSize), h.Sum64()}
}

// HelloLayout is a transport's hello on the wire: Len bytes opening with
// Magic, the four words of Hello at 4 to 20, its Namespace at
// NamespaceAt, the transport's own fields anywhere else.
type HelloLayout struct {
	Magic       string
	Len         int
	NamespaceAt int
	What        string // names the hello in errors: "bad <What> hello"
}

// Marshal returns a hello of l.Len bytes saying h, its own fields zero.
func (l HelloLayout) Marshal(h Hello) []byte {
	b := make([]byte, l.Len)
	copy(b, l.Magic)
	binary.LittleEndian.PutUint32(b[4:], h.Rank)
	binary.LittleEndian.PutUint32(b[8:], h.Size)
	binary.LittleEndian.PutUint32(b[12:], h.Slots)
	binary.LittleEndian.PutUint32(b[16:], h.SlotSize)
	binary.LittleEndian.PutUint64(b[l.NamespaceAt:], h.Namespace)
	return b
}

// Parse reads what b, a hello of this layout, says. A hello of another
// length or magic is refused with an error wrapping ErrProtocol.
func (l HelloLayout) Parse(b []byte) (Hello, error) {
	if len(b) != l.Len || string(b[:4]) != l.Magic {
		return Hello{}, fmt.Errorf("bad %s hello: %w", l.What, ErrProtocol)
	}
	return Hello{
		Rank:      binary.LittleEndian.Uint32(b[4:]),
		Size:      binary.LittleEndian.Uint32(b[8:]),
		Slots:     binary.LittleEndian.Uint32(b[12:]),
		SlotSize:  binary.LittleEndian.Uint32(b[16:]),
		Namespace: binary.LittleEndian.Uint64(b[l.NamespaceAt:]),
	}, nil
}

// Check says what is wrong with a peer's hello h, which this rank's is
// mine: a peer of another communicator, another job size, not the rank
// dialed (want; -1 on the accepting end, where any rank below capacity
// but this one may dial), or other slots.
func (h Hello) Check(mine Hello, want, capacity int) error {
	switch {
	case h.Namespace != mine.Namespace:
		return fmt.Errorf("peer belongs to another communicator: %w", ErrProtocol)
	case h.Size != mine.Size:
		return fmt.Errorf("peer says the job has %d ranks, this rank says %d", h.Size, mine.Size)
	case want >= 0 && int(h.Rank) != want:
		return fmt.Errorf("expected rank %d, peer says it is rank %d", want, h.Rank)
	case want < 0 && (h.Rank == mine.Rank || int(h.Rank) >= capacity):
		return fmt.Errorf("rank %d may not dial rank %d", h.Rank, mine.Rank)
	case h.Slots != mine.Slots || h.SlotSize != mine.SlotSize:
		return fmt.Errorf("peer uses %d slots of %d bytes, this rank %d of %d (every rank must use the same transport options)",
			h.Slots, h.SlotSize, mine.Slots, mine.SlotSize)
	}
	return nil
}

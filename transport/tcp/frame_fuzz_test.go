//go:build linux

package tcp

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"unicode"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gocoll/gocoll/transport"
)

// frame builds one wire frame: kind, slot, payload length, credits.
func frame(kind byte, slot uint16, n, credits uint32, payload []byte) []byte {
	b := make([]byte, frameHdrLen, frameHdrLen+len(payload))
	b[0] = kind
	binary.LittleEndian.PutUint16(b[2:], slot)
	binary.LittleEndian.PutUint32(b[4:], n)
	binary.LittleEndian.PutUint32(b[8:], credits)
	return append(b, payload...)
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// FuzzFrames feeds arbitrary bytes, as an authenticated but broken or
// hostile peer would send them, through a real socket into the receive
// path. Whatever arrives, the peer must end up delivering well-formed
// messages inside its slab, or failing with ErrPeerLost: no panic, no
// allocation sized by the peer, no write outside the slab.
func FuzzFrames(f *testing.F) {
	const slots, slotSize = 2, 64
	f.Add(frame(frameData, 0, 5, 0, []byte("hello")))
	f.Add(cat(frame(frameData, 0, 3, 0, []byte("abc")), frame(frameData, 1, 0, 0, nil), frame(frameCredit, 0, 0, 2, nil)))
	f.Add(frame(frameData, 0, slotSize+1, 0, make([]byte, slotSize+1)))
	f.Add(frame(frameData, 1, 1, 0, []byte("x")))
	f.Add(frame(frameData, 0, 0xffffffff, 0, nil))
	f.Add(frame(frameCredit, 0, 0, 3, nil))
	f.Add(frame(frameCredit, 0, 7, 0, nil))
	f.Add(frame(frameBye, 0, 0, 0, nil))
	f.Add(frame(frameAbort, 0, 9, 0, []byte("gave\nup\x00!")))
	f.Add(frame(frameAbort, 0, maxAbortText+1, 0, make([]byte, maxAbortText+1)))
	f.Add(frame(frameAbort, 0, 3, 1, []byte("why")))
	f.Add(frame(frameAbort, 0, 100, 0, []byte("truncated")))
	f.Add(cat(frame(frameData, 0, 1, 0, []byte("a")), frame(frameAbort, 0, 2, 0, []byte("no"))))
	f.Add(frame(9, 0, 0, 0, nil))
	f.Add(frame(frameData, 0, 10, 0, []byte("short")))
	f.Add([]byte{frameData, 0, 0})
	f.Add(cat(frame(frameData, 0, 1, 0, []byte("a")), frame(frameData, 1, 1, 0, []byte("b")), frame(frameData, 0, 1, 0, []byte("c"))))
	f.Fuzz(func(t *testing.T, wire []byte) {
		receive(t, wire, slots, slotSize, nil)
	})
}

// receive writes wire into one end of a socket pair and reads it at the
// other as peer 1 of a transport of slots and slotSize, over a sealed
// link if keys is not nil. Whatever arrives, the peer must end up
// delivering well-formed messages inside its slab, or failing with
// ErrPeerLost.
func receive(t *testing.T, wire []byte, slots, slotSize int, keys *linkKeys) {
	if len(wire) > 64<<10 {
		return // more than a socket buffer holds without a reader
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	if err := unix.SetNonblock(fds[0], true); err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(wire); {
		n, err := unix.Write(fds[1], wire[off:])
		if err != nil {
			t.Fatal(err)
		}
		off += n
	}
	unix.Shutdown(fds[1], unix.SHUT_WR)

	tr := &Transport{opts: Options{LinkOptions: transport.LinkOptions{Slots: slots, SlotSize: slotSize}}}
	p := tr.peerOnFd(1, fds[0], keys)
	defer p.closeFd()
	for i := 0; i < len(wire)+2 && !p.ended && p.Failed() == nil; i++ {
		p.readAll()
	}
	if !p.ended && p.Failed() == nil {
		t.Fatalf("%d bytes read without reaching the end of the stream or an error", len(wire))
	}
	if err := p.Failed(); err != nil && !errors.Is(err, transport.ErrPeerLost) {
		t.Fatalf("failure does not wrap ErrPeerLost: %v", err)
	}
	if err := p.Failed(); err != nil && strings.ContainsFunc(err.Error(), func(r rune) bool { return !unicode.IsPrint(r) }) {
		t.Fatalf("the peer wrote control characters into our error: %q", err)
	}
	slab := uintptr(unsafe.Pointer(unsafe.SliceData(p.slab)))
	for len(p.ready) > 0 {
		m := <-p.ready
		if len(m.Data) > slotSize || m.Slot < 0 || int(m.Slot) >= slots {
			t.Fatalf("delivered %d bytes in slot %d", len(m.Data), m.Slot)
		}
		if cap(m.Data) > 0 {
			start := uintptr(unsafe.Pointer(unsafe.SliceData(m.Data)))
			if start < slab || start+uintptr(cap(m.Data)) > slab+uintptr(len(p.slab)) {
				t.Fatalf("message of %d bytes lies outside the slab", len(m.Data))
			}
		}
	}
}

// FuzzSealedFrames is FuzzFrames over a sealed link: the input is read
// as frames (header, then as much of the payload as it says and there
// is), each sealed as a peer holding the keys would seal it, so that
// everything past the tag check is reached; a last byte of 1 flips a bit
// of the sealed stream, as an attacker on the path would.
func FuzzSealedFrames(f *testing.F) {
	const slots, slotSize = 2, 64
	f.Add(frame(frameData, 0, 5, 0, []byte("hello")))
	f.Add(cat(frame(frameData, 0, 3, 0, []byte("abc")), frame(frameData, 1, 0, 0, nil), frame(frameCredit, 0, 0, 2, nil)))
	f.Add(cat(frame(frameData, 0, 3, 0, []byte("abc")), []byte{1}))
	f.Add(frame(frameData, 0, slotSize+1, 0, make([]byte, slotSize+1)))
	f.Add(frame(frameCredit, 0, 0, 3, nil))
	f.Add(frame(frameCredit, 0, 7, 0, make([]byte, 7)))
	f.Add(frame(frameBye, 0, 0, 0, nil))
	f.Add(frame(frameAbort, 0, 9, 0, []byte("gave\nup\x00!")))
	f.Add(frame(9, 0, 0, 0, nil))
	f.Fuzz(func(t *testing.T, in []byte) {
		salt := []byte("fuzz salt")
		sender, err := deriveKeys([]byte("token"), salt, salt, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		receiver, err := deriveKeys([]byte("token"), salt, salt, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		var wire []byte
		rest := in
		for len(rest) >= frameHdrLen {
			hdr := rest[:frameHdrLen]
			n := min(int(binary.LittleEndian.Uint32(hdr[4:])), len(rest)-frameHdrLen, 1<<10)
			wire = append(wire, hdr...)
			wire = sender.send.aead.Seal(wire, sender.send.next(), rest[frameHdrLen:frameHdrLen+n], hdr)
			rest = rest[frameHdrLen+n:]
		}
		if len(rest) == 1 && rest[0] == 1 && len(wire) > 0 {
			wire[len(wire)/2] ^= 1
		}
		receive(t, wire, slots, slotSize, receiver)
	})
}

//go:build unix

package tcp

import (
	"encoding/binary"
	"fmt"

	"github.com/gocoll/gocoll/internal/safetext"
	"github.com/gocoll/gocoll/transport"
)

// The engine's side of a sealed link (Options.Encrypt; encrypt.go says
// how keys and nonces are made). Only links that encrypt come here: the
// plain engine branches off at parse, the end of a direct read, and the
// frame writers.

// sealData seals one data frame, header hdr and payload head then body,
// into ebuf and returns it. Called with wmu held.
func (p *peer) sealData(hdr, head, body []byte) []byte {
	frame := p.ebuf[:frameHdrLen]
	copy(frame, hdr)
	if len(head) == 0 {
		return p.seal.aead.Seal(frame, p.seal.next(), body, frame)
	}
	m := copy(p.ebuf[frameHdrLen:], head)
	m += copy(p.ebuf[frameHdrLen+m:], body)
	plain := p.ebuf[frameHdrLen : frameHdrLen+m]
	sealed := p.seal.aead.Seal(plain[:0], p.seal.next(), plain, frame)
	return p.ebuf[:frameHdrLen+len(sealed)]
}

// parseSealed consumes the sealed frames buffered in rbuf. A header is
// checked for what it may make us read (a known slot, a bounded length)
// before its frame is whole; nothing in it is acted on until the frame's
// tag is.
func (p *peer) parseSealed() {
	opts := p.t.opts
	for {
		if p.body != nil {
			n := copy(p.body[p.bodyGot:], p.rbuf[p.rpos:p.rend])
			p.rpos += n
			p.bodyGot += n
			if p.bodyGot < len(p.body) {
				return
			}
			p.openData()
			if p.Failed() != nil {
				return
			}
			continue
		}
		if p.rend-p.rpos < frameHdrLen {
			return
		}
		hdr := p.rbuf[p.rpos : p.rpos+frameHdrLen]
		kind := hdr[0]
		slot := int(binary.LittleEndian.Uint16(hdr[2:]))
		n := int(binary.LittleEndian.Uint32(hdr[4:]))
		credits := int(binary.LittleEndian.Uint32(hdr[8:]))
		// A header no peer of this build would send is a frame that
		// fails authentication: nothing else alters it on a sealed link.
		if credits > opts.Slots {
			p.badHeader("%d credits returned, only %d slots exist", credits, opts.Slots)
			return
		}
		if kind == frameData {
			if n > opts.SlotSize || slot != p.recvSeq%opts.Slots {
				p.badHeader("%d bytes for slot %d (expected slot %d, at most %d bytes)", n, slot, p.recvSeq%opts.Slots, opts.SlotSize)
				return
			}
			copy(p.rhdr[:], hdr)
			p.rpos += frameHdrLen
			off := slot * p.stride
			// As in parse: Release's atomic Add, acquired here, orders
			// the slot's last reader before this write.
			p.pending.Load()
			p.body, p.bodyGot, p.bodySlot = p.slab[off:off+n+tagLen:off+n+tagLen], 0, slot
			p.rcredits = credits
			p.recvSeq++
			continue
		}
		// Credit, goodbye and abort frames are opened whole in rbuf.
		if n > maxAbortText {
			p.badHeader("kind %d with %d bytes (at most %d)", kind, n, maxAbortText)
			return
		}
		if p.rend-p.rpos < frameHdrLen+n+tagLen {
			return
		}
		sealed := p.rbuf[p.rpos+frameHdrLen : p.rpos+frameHdrLen+n+tagLen]
		seq := p.open.seq
		text, err := p.open.aead.Open(sealed[:0], p.open.next(), sealed, hdr)
		p.rpos += frameHdrLen + n + tagLen
		if err != nil {
			p.authFailed(seq)
			return
		}
		switch kind {
		case frameCredit:
			if n != 0 {
				p.protocolError("credit frame with a %d-byte payload", n)
				return
			}
			if !p.takeCredits(credits) {
				return
			}
		case frameBye:
			p.ended = true
			p.fail(transport.ErrPeerClosed)
			return
		case frameAbort:
			p.ended = true
			p.fail(fmt.Errorf("%w: rank %d gave up: %s", transport.ErrPeerLost, p.rank, safetext.Printable(text)))
			return
		default:
			p.protocolError("unknown frame kind %d", kind)
			return
		}
	}
}

// openData authenticates and decrypts, in place, the data frame whose
// payload and tag fill body, then takes its credits and delivers it.
func (p *peer) openData() {
	seq := p.open.seq
	plain, err := p.open.aead.Open(p.body[:0], p.open.next(), p.body, p.rhdr[:])
	if err != nil {
		p.body = nil
		p.authFailed(seq)
		return
	}
	p.body = plain[:len(plain):len(plain)]
	if !p.takeCredits(p.rcredits) {
		p.body = nil
		return
	}
	p.deliver()
}

// takeCredits returns credits slots to the senders; false if the peer
// returned more than it was lent (p failed).
func (p *peer) takeCredits(credits int) bool {
	for i := 0; i < credits; i++ {
		select {
		case p.credits <- struct{}{}:
		default:
			p.protocolError("more credits returned than slots lent")
			return false
		}
	}
	if credits > 0 {
		notify(p.sendNote)
	}
	return true
}

// badHeader loses p over the header of its next frame, which fails a
// check made before its tag can be.
func (p *peer) badHeader(format string, args ...any) {
	p.fail(fmt.Errorf("%w: rank %d: %w: frame %d's header says %s: altered, replayed, dropped or reordered in transit",
		transport.ErrPeerLost, p.rank, ErrFrameAuth, p.open.seq, fmt.Sprintf(format, args...)))
}

// authFailed loses p over frame seq, which failed authentication.
func (p *peer) authFailed(seq uint64) {
	p.fail(fmt.Errorf("%w: rank %d: %w: frame %d was altered, replayed, dropped or reordered in transit, or sealed with another token",
		transport.ErrPeerLost, p.rank, ErrFrameAuth, seq))
}

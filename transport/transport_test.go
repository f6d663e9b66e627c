package transport

import (
	"testing"
	"unsafe"
)

// TestMessageFitsRegisters guards the size the Message comment explains:
// past 32 bytes the compiler stops keeping a Message in registers, and a
// small collective pays for it at every layer.
func TestMessageFitsRegisters(t *testing.T) {
	if n := unsafe.Sizeof(Message{}); n > 32 {
		t.Fatalf("transport.Message is %d bytes; keep it to 32 (see its doc comment)", n)
	}
}

package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestGet: ports are distinct, below the ephemeral range, and bindable by
// the caller.
func TestGet(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 50; i++ {
		p := Get(t)
		if seen[p] {
			t.Fatalf("port %s handed out twice", p)
		}
		seen[p] = true
		n, err := strconv.Atoi(p)
		if err != nil || n < lowest || n >= ephemeralMin() {
			t.Fatalf("port %q outside %d..%d", p, lowest, ephemeralMin()-1)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			t.Fatalf("port %s was handed out but cannot be bound: %v", p, err)
		}
		l.Close()
	}
}

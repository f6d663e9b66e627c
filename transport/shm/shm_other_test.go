//go:build !linux

package shm

import (
	"context"
	"errors"
	"github.com/gocoll/gocoll/transport"
	"runtime"
	"strings"
	"testing"
)

// TestUnsupported runs where the transport cannot (not on Linux): Connect
// and Probe must say why, in an error a caller can test for.
func TestUnsupported(t *testing.T) {
	tr, err := Connect(context.Background(), nil, 0, 2, nil, Options{})
	if tr != nil || !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "needs Linux") ||
		!strings.Contains(err.Error(), runtime.GOOS) {
		t.Fatalf("Connect: %v, %v", tr, err)
	}
	if err := Probe(); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Probe: %v", err)
	}
	if _, err := Connect(context.Background(), nil, 0, 2, nil, Options{LinkOptions: transport.LinkOptions{Slots: 1}}); err == nil || errors.Is(err, ErrUnsupported) {
		t.Fatalf("bad options are still bad options: %v", err)
	}
}

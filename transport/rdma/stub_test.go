//go:build !cgo || !linux

package rdma

import (
	"context"
	"errors"
	"github.com/gocoll/gocoll/transport"
	"runtime"
	"strings"
	"testing"
)

// TestStub runs with CGO_ENABLED=0, or on a system other than Linux:
// Connect and Probe must say why RDMA is unavailable, in an error a caller
// can test for.
func TestStub(t *testing.T) {
	linux := runtime.GOOS == "linux" || runtime.GOOS == "android"
	why := "unavailable: built without cgo"
	if !linux {
		why = "unavailable: needs Linux (libibverbs); this is " + runtime.GOOS
	}
	tr, err := Connect(context.Background(), nil, 0, 2, nil, Options{})
	if tr != nil || errors.Is(err, ErrNoCgo) != linux || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), why) {
		t.Fatalf("Connect without cgo: %v, %v", tr, err)
	}
	if _, err := Probe(Options{}); errors.Is(err, ErrNoCgo) != linux || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Probe without cgo: %v", err)
	}
	if _, err := Connect(context.Background(), nil, 0, 2, nil, Options{LinkOptions: transport.LinkOptions{Slots: 1}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad options are still bad options: %v", err)
	}
}

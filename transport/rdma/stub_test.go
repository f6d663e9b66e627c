//go:build !cgo || !linux

package rdma

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestStub runs with CGO_ENABLED=0: Connect and Probe must say why RDMA
// is unavailable, in an error a caller can test for.
func TestStub(t *testing.T) {
	tr, err := Connect(context.Background(), nil, 0, 2, nil, Options{})
	if tr != nil || !errors.Is(err, ErrNoCgo) || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "unavailable: built without cgo") {
		t.Fatalf("Connect without cgo: %v, %v", tr, err)
	}
	if _, err := Probe(Options{}); !errors.Is(err, ErrNoCgo) {
		t.Fatalf("Probe without cgo: %v", err)
	}
	if _, err := Connect(context.Background(), nil, 0, 2, nil, Options{Slots: 1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad options are still bad options: %v", err)
	}
}

//go:build !cgo || !linux

package rdma

import (
	"context"
	"fmt"
	"runtime"

	"github.com/gocoll/gocoll/transport"
)

// Transport is unavailable in this build; see ErrNoCgo.
type Transport struct{ transport.Transport }

// unavailable is why: no cgo on Linux, or not Linux at all.
func unavailable() error {
	if runtime.GOOS == "linux" || runtime.GOOS == "android" {
		return ErrNoCgo
	}
	return fmt.Errorf("%w: needs Linux (libibverbs); this is %s", ErrUnavailable, runtime.GOOS)
}

// Connect reports that RDMA needs cgo (and Linux).
func Connect(ctx context.Context, store transport.Store, rank, size int, token []byte, opts Options) (*Transport, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("rdma: rank %d: %w", rank, unavailable())
}

// Probe reports that RDMA needs cgo (and Linux).
func Probe(opts Options) (string, error) { return "", unavailable() }

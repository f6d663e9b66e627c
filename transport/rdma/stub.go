//go:build !cgo || !linux

package rdma

import (
	"context"
	"fmt"

	"github.com/gocoll/gocoll/transport"
)

// Transport is unavailable in this build; see ErrNoCgo.
type Transport struct{ transport.Transport }

// Connect reports that RDMA needs cgo (and Linux).
func Connect(ctx context.Context, store Store, rank, size int, token []byte, opts Options) (*Transport, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("rdma: rank %d: %w", rank, ErrNoCgo)
}

// Probe reports that RDMA needs cgo (and Linux).
func Probe(opts Options) (string, error) { return "", ErrNoCgo }

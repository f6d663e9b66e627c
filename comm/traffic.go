package comm

import "github.com/gocoll/gocoll/collectives"

// WithTraffic makes the communicator count, into t, the bytes its
// collectives move through memory on this rank: what they hand to the
// transport, what their reductions read and write, and what they copy
// (see collectives.Traffic, and docs/traffic.md for the model the counts
// check). Sub-communicators split from it count into t too. Without it
// nothing is counted, at no cost.
func WithTraffic(t *collectives.Traffic) Option { return func(s *settings) { s.traffic = t } }

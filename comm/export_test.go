package comm

import (
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/gocoll/gocoll/collectives"
	"github.com/gocoll/gocoll/internal/reduce"
	"github.com/gocoll/gocoll/transport"
)

// WithFakeHosts makes the job believe its ranks are spread over k hosts,
// in contiguous blocks (rank r on host r*k/size), whatever the machine
// they really run on: with it one machine tests what several hosts do
// (shared memory inside a "host", the network between them, hierarchical
// collectives). GOCOLL_FAKE_HOSTS=k does the same for a program.
func WithFakeHosts(k int) Option { return func(s *settings) { s.FakeHosts = k } }

// Die makes c's rank vanish as a killed process would, for the tests of
// package comm_test: every link of its process drops at once and its
// rendezvous connection ends without a goodbye, so the store records a
// death. NewLocal's store lives in rank 0's communicator, so rank 0
// cannot die this way; the e2e tests kill real processes.
func Die(c *Communicator) {
	transport.Abort(c.ext.mux.Transport(), errors.New("simulated death"))
	if c.store != nil {
		c.store.Close()
	}
}

// JobConfig is the configuration c's rank joined its job with, for a
// test that starts a replacement of one of its ranks.
func JobConfig(c *Communicator) Config { return c.cfg }

// ChoiceFingerprint hashes c's plan and the algorithm c would run for
// every collective over a sweep of sizes and element types: equal on
// every member of a communicator, or the members would call different
// algorithms.
func ChoiceFingerprint(c *Communicator) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%x|", c.plan.Fingerprint())
	kinds := []collectives.Kind{collectives.AllReduce, collectives.Broadcast, collectives.ReduceScatter,
		collectives.ReduceScatterV, collectives.AllGather, collectives.Reduce, collectives.Barrier, collectives.AllToAll}
	dts := []reduce.DType{reduce.Float64, reduce.Float32, reduce.Float16, reduce.BFloat16, reduce.Int32, reduce.Uint8}
	for _, kind := range kinds {
		for _, dt := range dts {
			for bytes := 8; bytes <= 64<<20; bytes *= 2 {
				for _, b := range []int{bytes, bytes * 3 / 2} {
					a, _ := c.g.Choice(kind, b, dt, reduce.Sum)
					fmt.Fprintf(h, "%d,", a)
				}
			}
		}
	}
	return h.Sum64()
}

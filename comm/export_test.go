package comm

import (
	"errors"

	"github.com/gocoll/gocoll/transport"
)

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

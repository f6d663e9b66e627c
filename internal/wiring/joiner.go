package wiring

import (
	"context"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/transport/tcp"
)

// linkToken is what a rank's links authenticate with, the one rule for
// every transport Connect builds and for an elastic job's joiner
// (ConnectJoiner): the job's token, or without one the job's secret the
// store handed store's connection (bootstrap.Client.LinkToken), the same
// for every rank of the job, so that links across hosts of a tokenless
// job are authenticated too.
func linkToken(store *bootstrap.Client) []byte { return store.LinkToken() }

// ConnectJoiner builds the TCP side of a process joining a running
// elastic job (comm's Grow) as job rank rank of cfg's job (cfg.Size is
// the job's first size): a store connection of its own, through which
// its links find the members' addresses, and the transport on it,
// authenticated as the members' links are. The caller owns both and
// closes the transport first; on error nothing is left open.
func ConnectJoiner(ctx context.Context, cfg bootstrap.Config, rank int, o tcp.Options) (*tcp.Transport, *bootstrap.Client, error) {
	links, err := bootstrap.DialJob(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	t, err := tcp.Connect(ctx, links, rank, cfg.Size, linkToken(links), o)
	if err != nil {
		links.Close()
		return nil, nil, err
	}
	return t, links, nil
}

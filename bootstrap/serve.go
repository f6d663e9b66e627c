package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	"github.com/gocoll/gocoll/internal/logging"
)

// ServeFor starts the store that rank 0 serves for the job cfg describes
// (cfg.Serve), admitting only ranks of cfg.Job and cfg.Size. It fails at
// once, wrapping ErrEnv, where serving cannot work: an address that is not
// this host's (a MASTER_ADDR naming another host would leave every rank
// retrying until its timeout), or a port another process holds (the torchrun
// agent's own store, another job). GRUN_ADDR=0.0.0.0:PORT serves on every
// interface, for an address that reaches this host through a NAT.
func ServeFor(cfg Config) (*Server, error) {
	srv, err := Listen(cfg.Addr, cfg.Token)
	if err == nil {
		srv.Expect(cfg.Job, cfg.Size)
		if len(cfg.Token) == 0 && cfg.Size > 1 {
			mode := admitLocal
			switch {
			case cfg.Insecure:
				mode = admitAny
				logging.L().Warn("GOCOLL_INSECURE=1: this job has no GRUN_TOKEN, so any process of any host that reaches " + cfg.Addr + " may join it")
			case cfg.Munge:
				// Ranks of other hosts prove themselves with munge;
				// elsewhere they are refused, told what to set.
				mode = admitMunge
			}
			srv.mu.Lock()
			srv.admits, srv.mungeSocket = mode, cfg.MungeSocket
			srv.mu.Unlock()
		}
		return srv, nil
	}
	src := cfg.Source
	if src == "" {
		src = "config"
	}
	host, port, _ := net.SplitHostPort(cfg.Addr)
	switch {
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return nil, fmt.Errorf("%s: rank 0 serves the rendezvous at %s, but %s is not an address of this host (%s): set MASTER_ADDR (or GRUN_ADDR) to rank 0's host: %w",
			src, cfg.Addr, host, hostAddrs(), ErrEnv)
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("%s: rank 0 cannot serve the rendezvous at %s: port %s is in use by another process (another job on this host?): give each job its own MASTER_PORT (or GRUN_ADDR): %w",
			src, cfg.Addr, port, ErrEnv)
	}
	return nil, fmt.Errorf("%s: rank 0 cannot serve the rendezvous: %w", src, err)
}

// hostAddrs lists this host's interface addresses, for messages.
func hostAddrs() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "its addresses unknown: " + err.Error()
	}
	var b []string
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			b = append(b, n.IP.String())
		}
	}
	return "its addresses: " + strings.Join(b, ", ")
}

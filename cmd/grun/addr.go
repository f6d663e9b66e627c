package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// ErrAddr wraps failures to find an address the other hosts can reach.
var ErrAddr = errors.New("no reachable address for the rendezvous store")

// isLocalHost reports whether a host of the host list is this one, where
// ranks run as grun's children rather than through rsh: "localhost", a
// loopback address, or this host's own name (short or full).
func isLocalHost(name, hostname string) bool {
	if name == "localhost" {
		return true
	}
	if ip := net.ParseIP(name); ip != nil {
		return ip.IsLoopback()
	}
	if hostname == "" {
		return false
	}
	short, _, _ := strings.Cut(hostname, ".")
	return name == hostname || name == short
}

// storeAddrs decides where the rendezvous store listens and which address
// each host's ranks dial, and says how it chose (for the log). All-local
// jobs use 127.0.0.1. Otherwise the address is the one this host sends from
// toward each remote host (found by a UDP "connect", which sends nothing),
// or the first address of iface (which an all-local job gives for ranks
// that join from other hosts, grun --join); ifaceFrom names where iface came from
// (--iface or GOCOLL_IFACE), for messages.
// When the remote hosts are reached through different local addresses the
// store listens on all interfaces and each host is told the address that
// faces it. Local ranks of a multi-host job dial the first remote host's
// address, which is this host's too.
func storeAddrs(ctx context.Context, remote []string, iface, ifaceFrom string) (listen string, dial map[string]string, how string, err error) {
	dial = make(map[string]string)
	if len(remote) == 0 && iface == "" {
		return "127.0.0.1:0", dial, "every rank is on this host", nil
	}
	if iface != "" {
		ip, err := ifaceAddr(iface, ifaceFrom)
		if err != nil {
			return "", nil, "", err
		}
		if ip.IsLoopback() && len(remote) == 0 {
			return "127.0.0.1:0", dial, "every rank is on this host", nil
		}
		if ip.IsLoopback() {
			return "", nil, "", fmt.Errorf("%s %s: %s is a loopback address, which other hosts cannot reach: %w", ifaceFrom, iface, ip, ErrAddr)
		}
		for _, h := range remote {
			dial[h] = ip.String()
		}
		return net.JoinHostPort(ip.String(), "0"), dial, ifaceFrom + " " + iface, nil
	}
	var first string
	same := true
	for _, h := range remote {
		ip, err := sourceAddr(ctx, h)
		if err != nil {
			return "", nil, "", err
		}
		dial[h] = ip.String()
		if first == "" {
			first = dial[h]
		}
		same = same && dial[h] == first
	}
	how = "the route toward each host"
	if same {
		return net.JoinHostPort(first, "0"), dial, how, nil
	}
	return ":0", dial, how + " (several addresses: listening on all)", nil
}

// sourceAddr is the local address the kernel picks to reach host: resolved
// (a name with several addresses: the first that routes), then asked of
// the routing table through an unsent UDP "connect".
func sourceAddr(ctx context.Context, host string) (net.IP, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("host %s: %v (name it by address, or give --iface): %w", host, err, ErrAddr)
	}
	var lastErr error
	for _, ip := range ips {
		c, err := net.Dial("udp", net.JoinHostPort(ip.IP.String(), "9"))
		if err != nil {
			lastErr = err
			continue
		}
		src := c.LocalAddr().(*net.UDPAddr).IP
		c.Close()
		if src.IsLoopback() {
			// A name that resolves to this host (Debian's 127.0.1.1):
			// other hosts cannot dial a loopback address.
			return nil, fmt.Errorf("host %s resolves to %s, an address of this host; list this host as localhost, or give --iface: %w", host, ip.IP, ErrAddr)
		}
		return src, nil
	}
	return nil, fmt.Errorf("host %s: no route (%v); give --iface: %w", host, lastErr, ErrAddr)
}

// ifaceAddr is iface's first IPv4 address, or its first global IPv6 one.
func ifaceAddr(name, from string) (net.IP, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v: %w", from, name, err, ErrAddr)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v: %w", from, name, err, ErrAddr)
	}
	var v6 net.IP
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip4 := ipn.IP.To4(); ip4 != nil {
			return ip4, nil
		}
		if v6 == nil && ipn.IP.IsGlobalUnicast() {
			v6 = ipn.IP
		}
	}
	if v6 != nil {
		return v6, nil
	}
	return nil, fmt.Errorf("%s %s has no usable address: %w", from, name, ErrAddr)
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

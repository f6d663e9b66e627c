//go:build unix

package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
)

func TestStoreAddrs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	listen, dial, how, err := storeAddrs(ctx, nil, "lo", "--iface")
	if err != nil || listen != "127.0.0.1:0" || len(dial) != 0 || how == "" {
		t.Errorf("all-local job: listen %q, dial %v, how %q, %v; want 127.0.0.1:0 whatever the interface", listen, dial, how, err)
	}
	loName := loopbackIface(t)
	errTests := []struct {
		name        string
		remote      []string
		iface, from string
		inMsg       []string
	}{
		{"loopback --iface", []string{"h1"}, loName, "--iface", []string{"--iface " + loName, "loopback address"}},
		{"loopback GOCOLL_IFACE", []string{"h1"}, loName, "GOCOLL_IFACE", []string{"GOCOLL_IFACE " + loName, "loopback"}},
		{"no such interface", []string{"h1"}, "gocollnone0", "GOCOLL_IFACE", []string{"GOCOLL_IFACE gocollnone0"}},
		{"host is this host", []string{"127.0.0.2"}, "", "", []string{"host 127.0.0.2", "list this host as localhost, or give --iface"}},
		{"unresolvable host", []string{"gocoll-no-such-host.invalid"}, "", "", []string{"host gocoll-no-such-host.invalid", "--iface"}},
	}
	for _, tc := range errTests {
		_, _, _, err := storeAddrs(ctx, tc.remote, tc.iface, tc.from)
		if !errors.Is(err, ErrAddr) {
			t.Errorf("%s: error %v, want one wrapping ErrAddr", tc.name, err)
			continue
		}
		for _, m := range tc.inMsg {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: error %q does not say %q", tc.name, err, m)
			}
		}
	}
}

// loopbackIface is the name of this host's loopback interface.
func loopbackIface(t *testing.T) string {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagLoopback != 0 {
			return ifi.Name
		}
	}
	t.Fatal("no loopback interface")
	return ""
}

func TestParseArgsIface(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env         map[string]string
		args        []string
		iface, from string
	}{
		{nil, nil, "", ""},
		{map[string]string{"GOCOLL_IFACE": " eth1 "}, nil, "eth1", "GOCOLL_IFACE"},
		{map[string]string{"GOCOLL_IFACE": ""}, nil, "", ""},
		{map[string]string{"GOCOLL_IFACE": "eth1"}, []string{"--iface", "ib0"}, "ib0", "--iface"},
		{nil, []string{"-iface=ib0"}, "ib0", "--iface"},
	}
	for _, tc := range tests {
		lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		cfg, err := parseArgs(append(append([]string{"-n", "1"}, tc.args...), "prog"), lookup)
		if err != nil || cfg.iface != tc.iface || cfg.ifaceFrom != tc.from {
			t.Errorf("env %v, args %q: iface %q from %q (%v), want %q from %q", tc.env, tc.args, cfg.iface, cfg.ifaceFrom, err, tc.iface, tc.from)
		}
	}
}

//go:build linux

// Package peercred tells which local user is at the other end of a
// connection, so that a job's listeners refuse other users' processes on
// their host even when the job has no token.
//
// A Unix socket says so itself (SO_PEERCRED). For TCP, the other end's
// socket, if it is on this host (and in this network namespace), is listed
// in /proc/net/tcp or /proc/net/tcp6 under its own address, with its
// owner's uid; a peer not listed there is on another host, and the
// question does not arise (Remote).
package peercred

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrOtherUser means the peer is a process of another user of this host.
var ErrOtherUser = errors.New("connection from another user's process")

// Remote is the uid Lookup returns for a TCP peer on another host.
const Remote = -1

// Check refuses (ErrOtherUser) a peer on this host that runs as another
// user than this process. A TCP peer on another host passes: what it may
// do is the token's business.
func Check(c net.Conn) error {
	uid, err := Lookup(c)
	if err != nil {
		return err
	}
	if uid != Remote && uid != os.Geteuid() {
		return fmt.Errorf("uid %d, this job runs as uid %d: %w", uid, os.Geteuid(), ErrOtherUser)
	}
	return nil
}

// Lookup returns the uid of c's peer: a Unix socket's from the kernel, a
// TCP connection's from /proc/net/tcp{,6}, Remote if the peer is not on
// this host.
func Lookup(c net.Conn) (int, error) {
	switch c := c.(type) {
	case *net.UnixConn:
		raw, err := c.SyscallConn()
		if err != nil {
			return 0, err
		}
		var cred *unix.Ucred
		var serr error
		if err := raw.Control(func(fd uintptr) {
			cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		}); err != nil {
			return 0, err
		}
		if serr != nil {
			return 0, fmt.Errorf("SO_PEERCRED: %w", serr)
		}
		return int(cred.Uid), nil
	case *net.TCPConn:
		local, lok := c.LocalAddr().(*net.TCPAddr)
		remote, rok := c.RemoteAddr().(*net.TCPAddr)
		if !lok || !rok {
			return 0, fmt.Errorf("peercred: addresses %v, %v", c.LocalAddr(), c.RemoteAddr())
		}
		return tcpOwner(remote.AddrPort(), local.AddrPort())
	}
	return 0, fmt.Errorf("peercred: %T is neither TCP nor a Unix socket", c)
}

// tcpOwner finds the socket whose own address is peer and whose remote
// one is us, and returns its uid, or Remote.
func tcpOwner(peer, us netip.AddrPort) (int, error) {
	found := false
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return 0, err
		}
		found = true
		uid, err := scan(f, peer, us)
		f.Close()
		if err != nil || uid != Remote {
			return uid, err
		}
	}
	if !found {
		return 0, errors.New("peercred: no /proc/net/tcp to find a TCP peer's owner in")
	}
	return Remote, nil
}

// scan reads one /proc/net/tcp table: a header, then lines of
// "sl local_address rem_address st tx:rx tr:when retrnsmt uid ...".
func scan(f *os.File, peer, us netip.AddrPort) (int, error) {
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 {
			continue
		}
		l, err1 := parseAddr(fs[1])
		r, err2 := parseAddr(fs[2])
		if err1 != nil || err2 != nil || !same(l, peer) || !same(r, us) {
			continue
		}
		uid, err := strconv.Atoi(fs[7])
		if err != nil {
			return 0, fmt.Errorf("peercred: uid %q in %s", fs[7], f.Name())
		}
		return uid, nil
	}
	return Remote, sc.Err()
}

// same compares addresses, an IPv4-mapped IPv6 one equal to its IPv4.
func same(a, b netip.AddrPort) bool {
	return a.Port() == b.Port() && a.Addr().Unmap() == b.Addr().Unmap()
}

// parseAddr reads "0100007F:1F90": the address as 32-bit words in the
// host's byte order (little-endian on every Linux gocoll runs on), the
// port big-endian hex.
func parseAddr(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, errors.New("no port")
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, err
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, errors.New("bad address")
	}
	for i := 0; i < len(raw); i += 4 {
		binary.BigEndian.PutUint32(raw[i:], binary.LittleEndian.Uint32(raw[i:]))
	}
	ip, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(ip, uint16(port)), nil
}

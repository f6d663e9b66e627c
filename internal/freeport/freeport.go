// Package freeport hands tests a TCP port to give a program that will
// listen on it itself (a launcher's MASTER_PORT, a rank 0's store).
//
// The usual trick, listening on port 0 and closing, returns a port from the
// kernel's ephemeral range, which every other test running at the same
// time draws from too: by the time the program binds it, another test's
// listener or outgoing connection may hold it, and the program then fails,
// rightly, with "address in use". Ports here are drawn at random from
// below that range, checked free on every interface, and never handed out
// twice in one test binary.
package freeport

import (
	"fmt"
	"math/rand"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

var (
	mu     sync.Mutex
	issued = map[int]bool{}
)

// lowest is the bottom of the range ports are drawn from: above the
// well-known and the commonly configured service ports.
const lowest = 20000

// Get returns a port, as a string, that is free on every interface now and
// that no other caller in this process has been given.
func Get(t testing.TB) string {
	t.Helper()
	top := ephemeralMin() - 1
	if top < lowest+1000 {
		top = lowest + 1000
	}
	mu.Lock()
	defer mu.Unlock()
	for try := 0; try < 200; try++ {
		p := lowest + rand.Intn(top-lowest+1)
		if issued[p] {
			continue
		}
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		issued[p] = true
		return strconv.Itoa(p)
	}
	t.Fatalf("freeport: no free port in %d..%d after 200 tries", lowest, top)
	return ""
}

// ephemeralMin is the bottom of the kernel's ephemeral port range (32768
// where it cannot be read, Linux's default).
func ephemeralMin() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var lo, hi int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &lo, &hi); err != nil || lo <= 0 {
		return 32768
	}
	return lo
}

// Command stranger is a process of another user that tries to get into a
// running job (issue 41): it joins the rendezvous store as a rank and scans
// it, then dials each rank's TCP and shared-memory listeners given and runs
// the handshake, with the token in STRANGER_TOKEN (empty: none). It prints
// one line per attempt, what it tried and how it ended:
//
//	store 127.0.0.1:29500: denied: ...   the job's end said: wrong token (auth.ErrDenied)
//	tcp 127.0.0.1:40813: hung up: ...    the job's end closed without a word (a refused uid)
//	shm @gocoll-shm-...: other: ...      anything else (a closed port, a protocol error)
//	tcp 127.0.0.1:40813: ADMITTED        the stranger got in
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/auth"
)

// addrs is a flag given once per address.
type addrs []string

func (a *addrs) String() string     { return strings.Join(*a, ",") }
func (a *addrs) Set(v string) error { *a = append(*a, v); return nil }

func main() {
	store := flag.String("store", "", "the rendezvous store, host:port")
	var tcpAddrs, shmAddrs addrs
	flag.Var(&tcpAddrs, "tcp", "a rank's TCP listener, host:port (repeated)")
	flag.Var(&shmAddrs, "shm", "a rank's shared-memory socket, @name (repeated)")
	flag.Parse()
	token := []byte(os.Getenv("STRANGER_TOKEN"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if *store != "" {
		// Insecure: the stranger does not care whose the store is (a rank
		// without a token refuses a store of another user); it wants in.
		c, err := bootstrap.DialJob(ctx, bootstrap.Config{Addr: *store, Token: token, Insecure: true})
		if err == nil {
			err = c.Join(ctx, 1, 2, "")
			if err == nil {
				var m map[string][]byte
				m, err = c.Scan(ctx, "")
				if err == nil {
					fmt.Printf("store %s: ADMITTED: scanned %d keys\n", *store, len(m))
				}
			}
			c.Close()
		}
		if err != nil {
			fmt.Printf("store %s: %s: %v\n", *store, how(err), err)
		}
	}
	knock := func(what, network, addr string) {
		c, err := net.DialTimeout(network, addr, 5*time.Second)
		if err == nil {
			err = auth.Handshake(c, token, auth.Mesh, true, time.Now().Add(10*time.Second))
			c.Close()
		}
		if err != nil {
			fmt.Printf("%s %s: %s: %v\n", what, addr, how(err), err)
		} else {
			fmt.Printf("%s %s: ADMITTED\n", what, addr)
		}
	}
	for _, a := range tcpAddrs {
		knock("tcp", "tcp", a)
	}
	for _, a := range shmAddrs {
		knock("shm", "unix", a)
	}
}

// how names the way an attempt was refused.
func how(err error) string {
	switch {
	case errors.Is(err, auth.ErrDenied):
		return "denied"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "hung up"
	}
	return "other"
}

// Command stranger is a process of another user that tries to get into a
// running job (issue 41): it joins the rendezvous store as a rank and scans
// it, then dials a rank's TCP and shared-memory listeners and runs the
// handshake, with the token in STRANGER_TOKEN (empty: none). It prints one
// line per attempt: "store: refused: ..." or "store: ADMITTED ...", and so
// on.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/auth"
)

func main() {
	store := flag.String("store", "", "the rendezvous store, host:port")
	tcpAddr := flag.String("tcp", "", "a rank's TCP listener, host:port")
	shmAddr := flag.String("shm", "", "a rank's shared-memory socket, @name")
	flag.Parse()
	token := []byte(os.Getenv("STRANGER_TOKEN"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if *store != "" {
		c, err := bootstrap.Dial(ctx, *store, token)
		if err == nil {
			err = c.Join(ctx, 1, 2, "")
			if err == nil {
				var m map[string][]byte
				m, err = c.Scan(ctx, "")
				if err == nil {
					fmt.Printf("store: ADMITTED: scanned %d keys\n", len(m))
				}
			}
			c.Close()
		}
		if err != nil {
			fmt.Printf("store: refused: %v\n", err)
		}
	}
	knock := func(what, network, addr string) {
		if addr == "" {
			return
		}
		c, err := net.DialTimeout(network, addr, 5*time.Second)
		if err == nil {
			err = auth.Handshake(c, token, auth.Mesh, true, time.Now().Add(10*time.Second))
			c.Close()
		}
		if err != nil {
			fmt.Printf("%s: refused: %v\n", what, err)
		} else {
			fmt.Printf("%s: ADMITTED\n", what)
		}
	}
	knock("tcp", "tcp", *tcpAddr)
	knock("shm", "unix", *shmAddr)
}

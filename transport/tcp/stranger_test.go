package tcp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"github.com/gocoll/gocoll/transport"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/internal/auth"
	"github.com/gocoll/gocoll/transport/tcp"
)

// TestStrangers: while a job connects, strangers knock on the rendezvous
// store and on every rank's data port: with a wrong token, with random
// bytes, and by connecting and saying nothing. They must be refused and
// counted, and the job must still connect and move data correctly.
func TestStrangers(t *testing.T) {
	const n = 3
	token := []byte("the-real-job-token-0123456789abc")
	wrong := []byte("a-stranger-guess-0123456789abcde")
	srv, err := bootstrap.Listen("127.0.0.1:0", token)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// knock tries every kind of stranger against addr; it returns how many
	// connections it made.
	knock := func(addr string, svc auth.Service) int {
		tries := 0
		for _, how := range []string{"wrong token", "random bytes", "silence"} {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				continue // the listener closed: the mesh is complete
			}
			tries++
			switch how {
			case "wrong token":
				auth.Handshake(c, wrong, svc, true, time.Now().Add(2*time.Second))
			case "random bytes":
				b := make([]byte, 4096)
				rand.Read(b)
				c.SetDeadline(time.Now().Add(2 * time.Second))
				c.Write(b)
				c.Read(b)
			case "silence":
				time.Sleep(50 * time.Millisecond)
			}
			c.Close()
		}
		return tries
	}
	for i := 0; i < 3; i++ {
		knock(srv.Addr(), auth.Store)
	}

	// Ranks 0 and 1 connect now, rank 2 after the strangers are done, so
	// that the data ports of 0 and 1 stay open for them.
	ts := make([]*tcp.Transport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	strangersDone := make(chan struct{})
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			if r == n-1 {
				<-strangersDone
			}
			store, err := bootstrap.Dial(ctx, srv.Addr(), token)
			if err != nil {
				errs[r] = err
				return
			}
			t.Cleanup(func() { store.Close() })
			ts[r], errs[r] = tcp.Connect(ctx, store, r, n, token, tcp.Options{LinkOptions: transport.LinkOptions{Crowded: n > runtime.NumCPU()}})
		}(r)
	}
	// The test itself knows the token, so it can read where the data
	// ports are, as a stranger scanning ports would find them.
	spy, err := bootstrap.Dial(ctx, srv.Addr(), token)
	if err != nil {
		t.Fatal(err)
	}
	knocked := 0
	for r := 0; r < n-1; r++ {
		addr, err := spy.Get(ctx, "tcp/addr/"+fmt.Sprint(r))
		if err != nil {
			t.Fatal(err)
		}
		knocked += knock(string(addr), auth.Mesh)
	}
	spy.Close()
	close(strangersDone)
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: connect with strangers about: %v", r, err)
		}
	}
	defer func() {
		for _, tr := range ts {
			go tr.Close()
		}
	}()
	if knocked == 0 {
		t.Fatal("no data port was open to knock on; the test tests nothing")
	}
	// A silent stranger's connection is refused when its close reaches
	// the port, which may be after the mesh is complete: wait for that.
	refused := 0
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		refused = 0
		for _, tr := range ts {
			refused += tr.Refused()
		}
		if refused >= knocked || time.Now().After(deadline) {
			break
		}
	}
	if refused < knocked {
		t.Errorf("data ports refused %d connections, strangers made %d", refused, knocked)
	}
	if got := srv.Refused(); got < 9 {
		t.Errorf("store refused %d connections, strangers made 9", got)
	}

	// Every pair moves a distinct payload, which must arrive intact.
	payload := func(from, to int) []byte { return bytes.Repeat([]byte{byte(from*16 + to)}, 100_000) }
	var ops sync.WaitGroup
	failures := make(chan error, n*n*2)
	for from := 0; from < n; from++ {
		for to := 0; to < n; to++ {
			if from == to {
				continue
			}
			ops.Add(2)
			go func() {
				defer ops.Done()
				p := payload(from, to)
				for off := 0; off < len(p); off += ts[from].MaxMessage() {
					if err := ts[from].Send(ctx, to, p[off:min(off+ts[from].MaxMessage(), len(p))]); err != nil {
						failures <- err
						return
					}
				}
			}()
			go func() {
				defer ops.Done()
				var got []byte
				for len(got) < 100_000 {
					m, err := ts[to].Recv(ctx, from)
					if err != nil {
						failures <- err
						return
					}
					got = append(got, m.Data...)
					ts[to].Release(m)
				}
				if !bytes.Equal(got, payload(from, to)) {
					failures <- fmt.Errorf("%d -> %d: payload corrupted", from, to)
				}
			}()
		}
	}
	ops.Wait()
	close(failures)
	for err := range failures {
		t.Error(err)
	}
	t.Logf("strangers refused: store %d, data ports %d", srv.Refused(), refused)
}

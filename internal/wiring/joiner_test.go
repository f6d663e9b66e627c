package wiring

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/transport/tcp"
)

// TestJoinerLinks: a process joining a running elastic job links to its
// members with the token Connect gave them, with the job's token or
// without one (the secret the store hands each connection): a message
// each way crosses the link the joiner makes.
func TestJoinerLinks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		token []byte
	}{
		{"token", []byte("wiring-joiner")},
		{"tokenless", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 2
			ws, errs, addr := connectJob(t, n, Options{Transport: "tcp", Elastic: true}, tc.token)
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			if ws[0].Spare == 0 {
				t.Fatal("an elastic job's TCP side admits no replacement")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			joiner, links, err := ConnectJoiner(ctx, bootstrap.Config{Rank: 1, Size: n, Addr: addr, Token: tc.token}, n, tcp.Options{Spare: ws[0].Spare})
			if err != nil {
				t.Fatal(err)
			}
			defer links.Close()
			defer joiner.Close()
			hello := []byte("joined")
			if err := joiner.Send(ctx, 0, hello); err != nil {
				t.Fatalf("the joiner's send to rank 0: %v", err)
			}
			msg, err := ws[0].Transport.Recv(ctx, n)
			if err != nil {
				t.Fatalf("rank 0's receive from the joiner: %v", err)
			}
			got := bytes.Clone(msg.Data)
			ws[0].Transport.Release(msg)
			if !bytes.Equal(got, hello) {
				t.Fatalf("rank 0 received %q, want %q", got, hello)
			}
			if err := ws[0].Transport.Send(ctx, n, hello); err != nil {
				t.Fatalf("rank 0's send to the joiner: %v", err)
			}
			back, err := joiner.Recv(ctx, 0)
			if err != nil {
				t.Fatalf("the joiner's receive: %v", err)
			}
			joiner.Release(back)
		})
	}
}

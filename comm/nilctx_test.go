package comm_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gocoll/gocoll/comm"
)

// TestNilContext: every public call given a nil context returns an error
// matching ErrInvalid that says so, instead of panicking.
func TestNilContext(t *testing.T) {
	var nilCtx context.Context
	buf := make([]float32, 4)
	calls := map[string]func(c *comm.Communicator) error{
		"Init":         func(*comm.Communicator) error { _, err := comm.Init(nilCtx); return err },
		"New":          func(*comm.Communicator) error { _, err := comm.New(nilCtx, comm.Config{Size: 1}); return err },
		"NewLocal":     func(*comm.Communicator) error { _, err := comm.NewLocal(nilCtx, 2); return err },
		"AllReduce":    func(c *comm.Communicator) error { return comm.AllReduce(nilCtx, c, buf, comm.Sum) },
		"Broadcast":    func(c *comm.Communicator) error { return comm.Broadcast(nilCtx, c, buf, 0) },
		"Gather":       func(c *comm.Communicator) error { return comm.Gather(nilCtx, c, buf[:2], buf, 0) },
		"AllToAll":     func(c *comm.Communicator) error { return comm.AllToAll(nilCtx, c, buf[:2], buf[2:]) },
		"Barrier":      func(c *comm.Communicator) error { return c.Barrier(nilCtx) },
		"BarrierAsync": func(c *comm.Communicator) error { return c.BarrierAsync(nilCtx).Wait(context.Background()) },
		"AllReduceAsync": func(c *comm.Communicator) error {
			return comm.AllReduceAsync(nilCtx, c, buf, comm.Sum).Wait(nilCtx)
		},
		"Split": func(c *comm.Communicator) error { _, err := c.Split(nilCtx, 0, 0); return err },
		"Send":  func(c *comm.Communicator) error { return comm.Send(nilCtx, c, 1, 0, buf) },
		"Recv":  func(c *comm.Communicator) error { _, err := comm.Recv(nilCtx, c, 1, 0, buf); return err },
		"SendRecv": func(c *comm.Communicator) error {
			_, err := comm.SendRecv(nilCtx, c, buf[:2], 1, 0, buf[2:], 1, 0)
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			cs := local(t, 2)
			err := call(cs[0])
			if !errors.Is(err, comm.ErrInvalid) || !strings.Contains(err.Error(), "nil context") {
				t.Errorf("%s with a nil context: %v, want ErrInvalid saying so", name, err)
			}
		})
	}
}

package comm

import "context"

// Barrier returns once every rank has called it.
func (c *Communicator) Barrier(ctx context.Context) error {
	return c.run(ctx, "barrier", func(ctx context.Context) error { return c.g.Barrier(ctx) })
}

// BarrierAsync is Barrier, issued now and finished in the background.
func (c *Communicator) BarrierAsync(ctx context.Context) *Request {
	if c == nil {
		return c.start(ctx, job{err: errNil("barrier")})
	}
	return c.start(ctx, job{what: "barrier", f: func(ctx context.Context) error { return c.g.Barrier(ctx) }})
}

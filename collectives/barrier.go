package collectives

import "context"

// Barrier returns once every rank has entered it: in round k each rank
// signals rank r+2^k and waits for rank r-2^k, so after ceil(log2 n) rounds
// everyone has heard, directly or not, from everyone.
func (g *Group) Barrier(ctx context.Context) error {
	n, r := g.t.Size(), g.t.Rank()
	algo := g.choose(Barrier, 0)
	c := g.newCall(ctx, spec{what: tag(Barrier, algo, 0, 0)})
	if algo == Local {
		return nil
	}
	for d := 1; d < n; d <<= 1 {
		if err := c.send(mod(r+d, n), nil); err != nil {
			return err
		}
		msg, err := c.recv(mod(r-d, n), 0)
		if err != nil {
			return err
		}
		c.release(msg)
	}
	return nil
}

// Package mesh is the link core the transports share (tcp, shm, rdma):
// Links makes a rank's links on demand (who dials, the grace a lower rank
// gives a higher one, whose connection wins when both dial, peers found
// unreachable, the eager connect), Door is the accept loop with its
// bound on connections authenticating at once and its refusal count and
// log, and Loss records the peers lost, for transport.LossNotifier. Each
// transport plugs in its own dial, handshake and register steps. tcp and
// shm link through Links; rdma, whose queue pairs outlive the exchanges
// that bring them up, keeps its own state machine on Attempt, Door and
// Loss. Rings and Spin are the defaults and checks of the options every
// transport takes; Waits adapts the spin to how long waits last, and
// Await is the wait of the engines that one call drives at a time (tcp,
// rdma).
package mesh

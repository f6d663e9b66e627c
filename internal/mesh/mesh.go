// Package mesh is the link core the transports share (tcp, shm, rdma),
// so that what is alike in them is written once and each plugs in only
// what is its own:
//
//   - Links makes a rank's links on demand (who dials, the grace a lower
//     rank gives a higher one, whose connection wins when both dial,
//     peers found unreachable, the eager connect); Open opens its door
//     and publishes the address, Reach is a call's way to a peer, Dial
//     finds a peer's address in the store and connects to it.
//   - Door is the accept loop, with its bound on connections
//     authenticating at once and its refusal count and log.
//   - Hello is what every transport's hello says (rank, size, slots,
//     namespace) and Check what is wrong with a peer's; HelloLayout puts
//     it on the wire where each transport's hello has it.
//   - Fault is how one link failed, once; Loss records the peers lost,
//     for transport.LossNotifier; Receive is Recv for a transport that
//     queues each peer's messages on a channel.
//   - Arrivals hands new links to a progress engine's own list (tcp,
//     rdma); Await is the wait of the engines that one call drives at a
//     time, Ended says when such a wait must stop, and Waits adapts the
//     spin to how long waits last.
//   - Rings fills and checks the options every transport takes
//     (transport.LinkOptions); Spin is the default busy-poll budget.
//
// tcp and shm link through Links; rdma, whose queue pairs outlive the
// exchanges that bring them up, keeps its own state machine on Attempt,
// Door, Fault and Loss. Each transport plugs in its own dial, handshake
// and register steps.
package mesh

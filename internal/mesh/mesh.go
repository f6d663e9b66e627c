// Package mesh holds what the transports share to link their ranks.
// Links is the on-demand pattern of connections a socket transport
// makes: a peer is linked the first time a call needs it, by whichever
// end needs it first (shm uses it; tcp keeps its own copy of the same
// rules, woven into its engine). Rings and Spin are the defaults and
// checks of the options every transport (rdma too) takes; Waits adapts
// the spin to how long waits last, and Await is the wait of the engines
// that one call drives at a time (tcp, rdma).
package mesh

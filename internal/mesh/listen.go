package mesh

import "net"

// ListenHost is the host a rank listens on for its peers' connections:
// explicit when set, else the local address of the rank's connection to
// the rendezvous store (the interface through which the other hosts reach
// this one, since they reach the store), else loopback.
func ListenHost(explicit string, store any) string {
	if explicit != "" {
		return explicit
	}
	if la, ok := store.(interface{ LocalAddr() net.Addr }); ok {
		if ta, ok := la.LocalAddr().(*net.TCPAddr); ok {
			return ta.IP.String()
		}
	}
	return "127.0.0.1"
}

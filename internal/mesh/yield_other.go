//go:build !linux

package mesh

import "runtime"

// YieldCPU lets the other goroutines of this process run, whether or not
// the peer is one (shared). Unlike Linux's sched_yield it does not hand
// the CPU to other processes: ranks in one process (comm.NewLocal,
// tests) still take turns, ranks in separate processes rely on the
// short crowded spin.
func YieldCPU(shared bool) { runtime.Gosched() }

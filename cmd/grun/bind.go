package main

import (
	"errors"
	"fmt"
)

// bindMode is --bind-to: whether each rank grun starts on this host is
// pinned to one CPU of its own, as mpirun pins ranks to cores.
type bindMode int

const (
	bindAuto bindMode = iota // core when it fits (2 or more ranks here, no more than CPUs), else none
	bindCore
	bindNone
)

func parseBindMode(s string) (bindMode, error) {
	switch s {
	case "core":
		return bindCore, nil
	case "none":
		return bindNone, nil
	case "auto":
		return bindAuto, nil
	}
	return 0, errors.New("want core, none or auto")
}

// bindPlan picks a CPU for each of the local ranks (in start order) out
// of cpus, the CPUs grun may run on, or returns nil for no binding. A
// rank alone on its CPU is not descheduled for its peer, which is what a
// small collective's latency hangs on; but ranks outnumbering CPUs would
// then queue behind each other on one CPU while another idles, and a lone
// rank is better left free to run its own threads anywhere.
func bindPlan(mode bindMode, local int, cpus []int) ([]int, error) {
	switch {
	case mode == bindNone || local == 0:
		return nil, nil
	case local > len(cpus):
		if mode == bindCore {
			return nil, fmt.Errorf("--bind-to core: %d ranks on this host but only %d CPUs to bind them to (use --bind-to none to oversubscribe)", local, len(cpus))
		}
		return nil, nil
	case mode == bindAuto && local < 2:
		return nil, nil
	}
	return cpus[:local], nil
}

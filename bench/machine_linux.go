package main

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// machineCPUs is the machine's online CPUs (/sys/devices/system/cpu/online,
// "0-3,6"), not the share this process is bound to, or 0 if unknown.
func machineCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return 0
	}
	n := 0
	for _, r := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, ok := strings.Cut(r, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0
		}
		z := a
		if ok {
			if z, err = strconv.Atoi(hi); err != nil {
				return 0
			}
		}
		n += z - a + 1
	}
	return n
}

// boundCPUs lists the CPUs this process may run on ("1" for a rank grun
// bound to CPU 1), or "" if unknown.
func boundCPUs() string {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return ""
	}
	var ids []string
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			ids = append(ids, strconv.Itoa(i))
		}
	}
	return strings.Join(ids, ",")
}

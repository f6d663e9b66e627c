package wiring

import (
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// CPUList is the CPUs this process may run on, as "0,1,5", or "" if the
// kernel does not say.
func CPUList() string {
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

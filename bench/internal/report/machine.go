package report

import (
	"bufio"
	"os"
	"runtime"
	"strings"
)

// Machine returns the number of CPUs the machine has and their model, as
// /proc/cpuinfo lists them. runtime.NumCPU would give only the CPUs this
// process may use, which under a launcher that binds ranks is one or two.
// Without /proc it falls back to runtime.NumCPU and no model.
func Machine() (cores int, model string) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.NumCPU(), ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "processor":
			cores++
		case "model name":
			if model == "" {
				model = strings.Join(strings.Fields(v), " ")
			}
		}
	}
	if cores == 0 {
		cores = runtime.NumCPU()
	}
	return cores, model
}

// BoundCPUs is the list of CPUs this process may run on, in the kernel's
// cpulist form ("0-1,4"), or "" where the kernel does not say.
func BoundCPUs() string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

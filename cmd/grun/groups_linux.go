package main

import (
	"bytes"
	"os"
	"strconv"
)

// liveGroups returns the process groups that have a member which is not a
// zombie. kill(-pgid, 0) cannot tell: it succeeds while only zombies are
// left, and a rank's orphaned children stay zombies for as long as whoever
// inherited them takes to reap them, which in a container whose init does
// not reap (or where grun is init) is forever. ok is false when /proc
// cannot be read.
func liveGroups() (live map[int]bool, ok bool) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, false
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, false
	}
	live = make(map[int]bool)
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		// Vanishing between Readdirnames and here is normal: skip it.
		stat, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid pgrp ..."; comm may hold spaces and
		// parentheses, so fields are counted from the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(stat[i+1:])
		if len(f) < 3 || string(f[0]) == "Z" || string(f[0]) == "X" {
			continue
		}
		if pgrp, err := strconv.Atoi(string(f[2])); err == nil {
			live[pgrp] = true
		}
	}
	return live, true
}

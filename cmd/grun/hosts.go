package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrHosts wraps every error about a host list: -H, --hostfile, or the
// Slurm allocation.
var ErrHosts = errors.New("bad host list")

// maxSlots bounds a single host's slots and a nodelist's expansion, so that
// a typo ("slots=4000000000", "n[0-99999999]") is an error rather than an
// allocation that takes the machine down.
const maxSlots = 1 << 16

// hostSlots is one host of a job and how many ranks it may run.
type hostSlots struct {
	name  string
	slots int
}

// addHost appends h, or adds its slots to an earlier entry of the same
// name: a host listed twice (as Open MPI allows in hostfiles) keeps its
// first position.
func addHost(hosts []hostSlots, h hostSlots) ([]hostSlots, error) {
	for i := range hosts {
		if hosts[i].name == h.name {
			if hosts[i].slots+h.slots > maxSlots {
				return nil, fmt.Errorf("host %s: more than %d slots in all: %w", h.name, maxSlots, ErrHosts)
			}
			hosts[i].slots += h.slots
			return hosts, nil
		}
	}
	return append(hosts, h), nil
}

// checkHostName refuses what cannot be a host name and could confuse rsh
// or the remote shell: empty names, whitespace, control characters, and a
// leading '-' that ssh would take for an option.
func checkHostName(name string) error {
	if name == "" {
		return fmt.Errorf("empty host name: %w", ErrHosts)
	}
	if name[0] == '-' {
		return fmt.Errorf("host name %q starts with '-': %w", name, ErrHosts)
	}
	for _, c := range name {
		if c <= ' ' || c == 0x7f {
			return fmt.Errorf("host name %q contains a space or control character: %w", name, ErrHosts)
		}
	}
	return nil
}

func parseSlots(s, where string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxSlots {
		return 0, fmt.Errorf("%s: slots %q, want a whole number from 1 to %d: %w", where, s, maxSlots, ErrHosts)
	}
	return n, nil
}

// parseHostList parses -H: "host1:4,host2:4", a host without ":K" having
// one slot. An IPv6 address goes in brackets, "[fd00::1]:4".
func parseHostList(s string) ([]hostSlots, error) {
	var hosts []hostSlots
	for _, item := range strings.Split(s, ",") {
		name, slots := item, "1"
		if strings.HasPrefix(item, "[") {
			end := strings.IndexByte(item, ']')
			if end < 0 {
				return nil, fmt.Errorf("-H entry %q: no closing ']': %w", item, ErrHosts)
			}
			name = item[1:end]
			switch rest := item[end+1:]; {
			case rest == "":
			case rest[0] == ':':
				slots = rest[1:]
			default:
				return nil, fmt.Errorf("-H entry %q: want [ADDRESS]:SLOTS: %w", item, ErrHosts)
			}
		} else if i := strings.LastIndexByte(item, ':'); i >= 0 {
			if strings.Count(item, ":") > 1 {
				return nil, fmt.Errorf("-H entry %q: put an IPv6 address in brackets, as in [%s]:4: %w", item, item, ErrHosts)
			}
			name, slots = item[:i], item[i+1:]
		}
		if err := checkHostName(name); err != nil {
			return nil, fmt.Errorf("-H entry %q: %w", item, err)
		}
		n, err := parseSlots(slots, fmt.Sprintf("-H entry %q", item))
		if err != nil {
			return nil, err
		}
		if hosts, err = addHost(hosts, hostSlots{name, n}); err != nil {
			return nil, err
		}
	}
	return hosts, nil
}

// parseHostfile parses a hostfile: one host per line, optionally followed
// by "slots=K" (default 1); '#' starts a comment; blank lines are skipped.
// name is the file's name, for messages.
func parseHostfile(data []byte, name string) ([]hostSlots, error) {
	var hosts []hostSlots
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 64<<10)
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		where := fmt.Sprintf("%s:%d", name, lineNo)
		h := hostSlots{name: fields[0], slots: 1}
		if err := checkHostName(h.name); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if strings.Contains(h.name, "=") {
			return nil, fmt.Errorf("%s: %q is not a host name (the host comes first, then slots=K): %w", where, h.name, ErrHosts)
		}
		seen := false
		for _, f := range fields[1:] {
			key, val, ok := strings.Cut(f, "=")
			if !ok || key != "slots" {
				return nil, fmt.Errorf("%s: %q: want slots=K after the host name: %w", where, f, ErrHosts)
			}
			if seen {
				return nil, fmt.Errorf("%s: slots given twice: %w", where, ErrHosts)
			}
			seen = true
			n, err := parseSlots(val, where)
			if err != nil {
				return nil, err
			}
			h.slots = n
		}
		var err error
		if hosts, err = addHost(hosts, h); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v: %w", name, err, ErrHosts)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("%s names no hosts: %w", name, ErrHosts)
	}
	return hosts, nil
}

// expandNodelist expands a Slurm compressed node list, as in
// SLURM_JOB_NODELIST: "node[01-04,07],gpu[1-2]" is node01 to node04,
// node07, gpu1 and gpu2. Numbers keep the width of the range's first number
// ("[08-10]" gives 08 09 10), and a name may hold several brackets
// ("r[1-2]n[1-2]" gives r1n1 r1n2 r2n1 r2n2).
func expandNodelist(s string) ([]string, error) {
	var out []string
	depth, start := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			switch s[i] {
			case '[':
				depth++
				if depth > 1 {
					return nil, fmt.Errorf("nodelist %q: nested '[': %w", s, ErrHosts)
				}
				continue
			case ']':
				depth--
				if depth < 0 {
					return nil, fmt.Errorf("nodelist %q: ']' without '[': %w", s, ErrHosts)
				}
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		} else if depth != 0 {
			return nil, fmt.Errorf("nodelist %q: no closing ']': %w", s, ErrHosts)
		}
		names, err := expandName(s[start:i], len(out))
		if err != nil {
			return nil, fmt.Errorf("nodelist %q: %w", s, err)
		}
		out = append(out, names...)
		start = i + 1
	}
	return out, nil
}

// expandName expands one comma-free element, "node[01-04,07]x"; have is how
// many names the list has so far, for the size bound.
func expandName(s string, have int) ([]string, error) {
	open := strings.IndexByte(s, '[')
	if open < 0 {
		if err := checkHostName(s); err != nil {
			return nil, err
		}
		return []string{s}, nil
	}
	end := open + strings.IndexByte(s[open:], ']')
	prefix, ranges, rest := s[:open], s[open+1:end], s[end+1:]
	suffixes, err := expandName("x"+rest, have) // "x": rest may be empty
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range strings.Split(ranges, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		a, errA := rangeNumber(lo)
		b, errB := rangeNumber(hi)
		switch {
		case errA != nil || errB != nil:
			return nil, fmt.Errorf("range %q: want N or N-M with whole numbers: %w", r, ErrHosts)
		case b < a:
			return nil, fmt.Errorf("range %q runs backwards: %w", r, ErrHosts)
		case have+len(out)+(b-a+1)*len(suffixes) > maxSlots:
			return nil, fmt.Errorf("more than %d nodes: %w", maxSlots, ErrHosts)
		}
		for k := a; k <= b; k++ {
			num := fmt.Sprintf("%0*d", len(lo), k)
			for _, suf := range suffixes {
				out = append(out, prefix+num+suf[1:])
			}
		}
	}
	if err := checkHostName(out[0]); err != nil {
		return nil, err
	}
	return out, nil
}

func rangeNumber(s string) (int, error) {
	if s == "" || len(s) > 9 {
		return 0, errors.New("bad number")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, errors.New("bad number")
		}
	}
	return strconv.Atoi(s)
}

// parseTasksPerNode expands SLURM_TASKS_PER_NODE ("2(x3),1": 2 tasks on
// each of three nodes, then 1) into one count per node.
func parseTasksPerNode(s string) ([]int, error) {
	var out []int
	for _, item := range strings.Split(s, ",") {
		count, times := item, "1"
		if i := strings.IndexByte(item, '('); i >= 0 {
			if !strings.HasPrefix(item[i:], "(x") || !strings.HasSuffix(item, ")") {
				return nil, fmt.Errorf("SLURM_TASKS_PER_NODE=%q: %q: want K or K(xM): %w", s, item, ErrHosts)
			}
			count, times = item[:i], item[i+2:len(item)-1]
		}
		k, errK := rangeNumber(count)
		m, errM := rangeNumber(times)
		if errK != nil || errM != nil || k < 1 || m < 1 || k > maxSlots {
			return nil, fmt.Errorf("SLURM_TASKS_PER_NODE=%q: %q: want K or K(xM) with whole numbers from 1: %w", s, item, ErrHosts)
		}
		if len(out)+m > maxSlots {
			return nil, fmt.Errorf("SLURM_TASKS_PER_NODE=%q: more than %d nodes: %w", s, maxSlots, ErrHosts)
		}
		for ; m > 0; m-- {
			out = append(out, k)
		}
	}
	return out, nil
}

// slurmHosts reads the hosts and slots of the Slurm allocation grun runs
// in; ok is false outside one. Slots come from SLURM_TASKS_PER_NODE, one
// per node when it is unset.
func slurmHosts(lookup func(string) (string, bool)) (hosts []hostSlots, ok bool, err error) {
	list, ok := lookup("SLURM_JOB_NODELIST")
	if !ok || strings.TrimSpace(list) == "" {
		if list, ok = lookup("SLURM_NODELIST"); !ok || strings.TrimSpace(list) == "" {
			return nil, false, nil
		}
	}
	names, err := expandNodelist(strings.TrimSpace(list))
	if err != nil {
		return nil, true, fmt.Errorf("SLURM_JOB_NODELIST: %w", err)
	}
	slots := make([]int, len(names))
	for i := range slots {
		slots[i] = 1
	}
	if tpn, ok := lookup("SLURM_TASKS_PER_NODE"); ok && strings.TrimSpace(tpn) != "" {
		if slots, err = parseTasksPerNode(strings.TrimSpace(tpn)); err != nil {
			return nil, true, err
		}
		if len(slots) != len(names) {
			return nil, true, fmt.Errorf("SLURM_TASKS_PER_NODE=%q gives %d nodes, SLURM_JOB_NODELIST=%q %d: %w",
				tpn, len(slots), list, len(names), ErrHosts)
		}
	}
	for i, name := range names {
		if hosts, err = addHost(hosts, hostSlots{name, slots[i]}); err != nil {
			return nil, true, err
		}
	}
	return hosts, true, nil
}

// placement is where one rank runs.
type placement struct {
	host      string
	localRank int
	localSize int
}

// place puts n ranks on hosts: by slot, filling each host before the next
// (ranks 0-3 on host1:4, 4-7 on host2:4), or with byNode round-robin over
// the hosts that have a free slot left (rank 0 on host1, 1 on host2, 2 on
// host1, ...). More ranks than slots is an error: running more ranks than
// a host has cores makes busy-polling ranks crawl.
func place(hosts []hostSlots, n int, byNode bool) ([]placement, error) {
	total := 0
	for _, h := range hosts {
		total += h.slots
	}
	if n > total {
		names := make([]string, len(hosts))
		for i, h := range hosts {
			names[i] = h.name + ":" + strconv.Itoa(h.slots)
		}
		return nil, fmt.Errorf("-n %d but only %d slots (%s): %w", n, total, strings.Join(names, ","), ErrHosts)
	}
	hostOf := make([]int, 0, n)
	if byNode {
		used := make([]int, len(hosts))
		for len(hostOf) < n {
			for i, h := range hosts {
				if len(hostOf) < n && used[i] < h.slots {
					used[i]++
					hostOf = append(hostOf, i)
				}
			}
		}
	} else {
		for i, h := range hosts {
			for k := 0; k < h.slots && len(hostOf) < n; k++ {
				hostOf = append(hostOf, i)
			}
		}
	}
	size := make([]int, len(hosts))
	for _, h := range hostOf {
		size[h]++
	}
	local := make([]int, len(hosts))
	out := make([]placement, n)
	for r, h := range hostOf {
		out[r] = placement{host: hosts[h].name, localRank: local[h], localSize: size[h]}
		local[h]++
	}
	return out, nil
}

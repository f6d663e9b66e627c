package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func hostsString(hosts []hostSlots) string {
	var parts []string
	for _, h := range hosts {
		parts = append(parts, fmt.Sprintf("%s:%d", h.name, h.slots))
	}
	return strings.Join(parts, ",")
}

func TestParseHostList(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want, err string
	}{
		{in: "host1:4,host2:4", want: "host1:4,host2:4"},
		{in: "a", want: "a:1"},
		{in: "a,b:2,a:3", want: "a:4,b:2"},
		{in: "198.18.0.2:2", want: "198.18.0.2:2"},
		{in: "[fd00::1]:3,[fd00::2]", want: "fd00::1:3,fd00::2:1"},
		{in: "node-7.cluster.example:65536", want: "node-7.cluster.example:65536"},
		{in: "", err: "empty host name"},
		{in: "a,,b", err: "empty host name"},
		{in: ":4", err: "empty host name"},
		{in: "a:", err: `slots ""`},
		{in: "a:0", err: `slots "0"`},
		{in: "a:-1", err: `slots "-1"`},
		{in: "a:x", err: `slots "x"`},
		{in: "a:65537", err: `slots "65537"`},
		{in: "a:40000,a:40000", err: "more than 65536 slots"},
		{in: "fd00::1:4", err: "put an IPv6 address in brackets"},
		{in: "[fd00::1", err: "no closing ']'"},
		{in: "[fd00::1]4", err: "want [ADDRESS]:SLOTS"},
		{in: "-oProxyCommand=x:1", err: "starts with '-'"},
		{in: "a b:1", err: "space or control character"},
	}
	for _, tc := range tests {
		got, err := parseHostList(tc.in)
		checkHosts(t, "-H "+tc.in, got, err, tc.want, tc.err)
	}
}

func checkHosts(t *testing.T, what string, got []hostSlots, err error, want, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) || !errors.Is(err, ErrHosts) {
			t.Errorf("%s: got %v, %v; want an ErrHosts mentioning %q", what, hostsString(got), err, wantErr)
		}
		return
	}
	if err != nil || hostsString(got) != want {
		t.Errorf("%s: got %q, %v; want %q", what, hostsString(got), err, want)
	}
}

func TestParseHostfile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want, err string
	}{
		{name: "plain", in: "host1 slots=4\nhost2 slots=2\n", want: "host1:4,host2:2"},
		{name: "comments and blanks", in: "# the cluster\n\n  host1 slots=4   # big one\n\t\nhost2\n#host3 slots=9\n", want: "host1:4,host2:1"},
		{name: "no final newline", in: "a slots=2", want: "a:2"},
		{name: "crlf", in: "a slots=2\r\nb slots=1\r\n", want: "a:2,b:1"},
		{name: "repeated host adds up", in: "a slots=2\nb\na slots=3\n", want: "a:5,b:1"},
		{name: "empty", in: "", err: "names no hosts"},
		{name: "only comments", in: "# nothing\n   \n", err: "names no hosts"},
		{name: "bad slots", in: "a slots=four\n", err: `hf:1: slots "four"`},
		{name: "zero slots", in: "a\nb slots=0\n", err: `hf:2: slots "0"`},
		{name: "unknown key", in: "a max_slots=4\n", err: `hf:1: "max_slots=4": want slots=K`},
		{name: "stray word", in: "a b\n", err: `hf:1: "b": want slots=K`},
		{name: "slots twice", in: "a slots=1 slots=2\n", err: "hf:1: slots given twice"},
		{name: "slots first", in: "slots=4 a\n", err: "the host comes first"},
		{name: "dash host", in: "-a\n", err: "starts with '-'"},
		{name: "control char", in: "a\x01b\n", err: "control character"},
	}
	for _, tc := range tests {
		got, err := parseHostfile([]byte(tc.in), "hf")
		checkHosts(t, tc.name, got, err, tc.want, tc.err)
	}
}

func TestExpandNodelist(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want, err string
	}{
		{in: "node01", want: "node01"},
		{in: "node[01-04,07],gpu[1-2]", want: "node01 node02 node03 node04 node07 gpu1 gpu2"},
		{in: "n[8-11]", want: "n8 n9 n10 n11"},
		{in: "n[08-10]", want: "n08 n09 n10"},
		{in: "a,b,c", want: "a b c"},
		{in: "r[1-2]n[1-2]", want: "r1n1 r1n2 r2n1 r2n2"},
		{in: "rack[1,3]-node[0-1].ib", want: "rack1-node0.ib rack1-node1.ib rack3-node0.ib rack3-node1.ib"},
		{in: "[1-3]", want: "1 2 3"},
		{in: "x[5]", want: "x5"},
		{in: "", err: "empty host name"},
		{in: "a,,b", err: "empty host name"},
		{in: "node[1-2", err: "no closing ']'"},
		{in: "node1-2]", err: "']' without '['"},
		{in: "node[[1]]", err: "nested '['"},
		{in: "node[]", err: `range ""`},
		{in: "node[3-1]", err: "runs backwards"},
		{in: "node[a-b]", err: `range "a-b"`},
		{in: "node[1-]", err: `range "1-"`},
		{in: "node[1-2-3]", err: `range "1-2-3"`},
		{in: "n[0-99999999]", err: "more than 65536 nodes"},
		{in: "a[0-999]b[0-999]", err: "more than 65536 nodes"},
		{in: "no de[1-2]", err: "space or control character"},
	}
	for _, tc := range tests {
		got, err := expandNodelist(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrHosts) {
				t.Errorf("%q: got %v, %v; want an ErrHosts mentioning %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("%q: got %q, %v; want %q", tc.in, strings.Join(got, " "), err, tc.want)
		}
	}
}

func TestParseTasksPerNode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want, err string
	}{
		{in: "4", want: "[4]"},
		{in: "2(x3),1", want: "[2 2 2 1]"},
		{in: "1,2(x2),3", want: "[1 2 2 3]"},
		{in: "", err: `""`},
		{in: "0", err: `"0"`},
		{in: "2(x0)", err: `"2(x0)"`},
		{in: "2(3)", err: "want K or K(xM)"},
		{in: "2(x3", err: "want K or K(xM)"},
		{in: "x", err: `"x"`},
		{in: "1(x70000)", err: "more than 65536 nodes"},
	}
	for _, tc := range tests {
		got, err := parseTasksPerNode(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrHosts) {
				t.Errorf("%q: got %v, %v; want an ErrHosts mentioning %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != tc.want {
			t.Errorf("%q: got %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestSlurmHosts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want string
		ok   bool
		err  string
	}{
		{name: "outside Slurm", env: map[string]string{}, ok: false},
		{name: "blank nodelist", env: map[string]string{"SLURM_JOB_NODELIST": " "}, ok: false},
		{name: "nodes and tasks", ok: true, want: "node01:2,node02:2,node03:2,gpu7:1",
			env: map[string]string{"SLURM_JOB_NODELIST": "node[01-03],gpu7", "SLURM_TASKS_PER_NODE": "2(x3),1"}},
		{name: "no task counts", ok: true, want: "a1:1,a2:1",
			env: map[string]string{"SLURM_JOB_NODELIST": "a[1-2]"}},
		{name: "old variable name", ok: true, want: "n1:1",
			env: map[string]string{"SLURM_NODELIST": "n1"}},
		{name: "counts disagree", ok: true, err: "gives 2 nodes",
			env: map[string]string{"SLURM_JOB_NODELIST": "a[1-3]", "SLURM_TASKS_PER_NODE": "1(x2)"}},
		{name: "bad nodelist", ok: true, err: "SLURM_JOB_NODELIST",
			env: map[string]string{"SLURM_JOB_NODELIST": "a[1-"}},
	}
	for _, tc := range tests {
		got, ok, err := slurmHosts(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
		if ok != tc.ok {
			t.Errorf("%s: ok %v, want %v", tc.name, ok, tc.ok)
		}
		checkHosts(t, tc.name, got, err, tc.want, tc.err)
	}
}

func TestPlace(t *testing.T) {
	t.Parallel()
	hosts := []hostSlots{{"a", 2}, {"b", 3}, {"c", 1}}
	tests := []struct {
		n      int
		byNode bool
		want   string // host/localRank/localSize per rank
		err    string
	}{
		{n: 6, want: "a/0/2 a/1/2 b/0/3 b/1/3 b/2/3 c/0/1"},
		{n: 3, want: "a/0/2 a/1/2 b/0/1"},
		{n: 1, want: "a/0/1"},
		{n: 6, byNode: true, want: "a/0/2 b/0/3 c/0/1 a/1/2 b/1/3 b/2/3"},
		{n: 4, byNode: true, want: "a/0/2 b/0/1 c/0/1 a/1/2"},
		{n: 7, err: "-n 7 but only 6 slots (a:2,b:3,c:1)"},
	}
	for _, tc := range tests {
		got, err := place(hosts, tc.n, tc.byNode)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrHosts) {
				t.Errorf("n=%d: got %v; want an error mentioning %q", tc.n, err, tc.err)
			}
			continue
		}
		var parts []string
		for _, p := range got {
			parts = append(parts, fmt.Sprintf("%s/%d/%d", p.host, p.localRank, p.localSize))
		}
		if err != nil || strings.Join(parts, " ") != tc.want {
			t.Errorf("n=%d byNode=%v: got %q, %v; want %q", tc.n, tc.byNode, strings.Join(parts, " "), err, tc.want)
		}
	}
}

// The fuzz targets check the parsers' promises on any input: no panic, an
// error that wraps ErrHosts, or a result whose every host name is one that
// is safe to hand to rsh and whose slots are in range.

func checkParsed(t *testing.T, hosts []hostSlots, err error) {
	if err != nil {
		if !errors.Is(err, ErrHosts) {
			t.Fatalf("error %v does not wrap ErrHosts", err)
		}
		return
	}
	if len(hosts) == 0 {
		t.Fatal("no hosts and no error")
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		if e := checkHostName(h.name); e != nil {
			t.Fatalf("accepted host %q: %v", h.name, e)
		}
		if h.slots < 1 || h.slots > maxSlots {
			t.Fatalf("host %q: %d slots", h.name, h.slots)
		}
		if seen[h.name] {
			t.Fatalf("host %q listed twice", h.name)
		}
		seen[h.name] = true
	}
}

func FuzzParseHostfile(f *testing.F) {
	f.Add([]byte("host1 slots=4\nhost2 slots=2\n"))
	f.Add([]byte("# c\n\n a slots=1 # x\nb\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		hosts, err := parseHostfile(data, "fuzz")
		checkParsed(t, hosts, err)
	})
}

func FuzzParseHostList(f *testing.F) {
	f.Add("host1:4,host2:4")
	f.Add("[fd00::1]:2,b")
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := parseHostList(s)
		checkParsed(t, hosts, err)
		if err == nil {
			for _, p := range []bool{false, true} {
				total := 0
				for _, h := range hosts {
					total += h.slots
				}
				pl, err := place(hosts, total, p)
				if err != nil || len(pl) != total {
					t.Fatalf("placing %d ranks on %v: %v", total, hosts, err)
				}
			}
		}
	})
}

func FuzzExpandNodelist(f *testing.F) {
	f.Add("node[01-04,07],gpu[1-2]", "2(x3),3(x3)")
	f.Add("r[1-2]n[08-10].x", "1")
	f.Fuzz(func(t *testing.T, list, tasks string) {
		names, err := expandNodelist(list)
		if err != nil {
			if !errors.Is(err, ErrHosts) {
				t.Fatalf("error %v does not wrap ErrHosts", err)
			}
		} else {
			if len(names) == 0 || len(names) > maxSlots {
				t.Fatalf("%d names", len(names))
			}
			for _, n := range names {
				if e := checkHostName(n); e != nil || strings.ContainsAny(n, "[],") {
					t.Fatalf("expanded to %q", n)
				}
			}
		}
		counts, err := parseTasksPerNode(tasks)
		if err != nil {
			if !errors.Is(err, ErrHosts) {
				t.Fatalf("error %v does not wrap ErrHosts", err)
			}
			return
		}
		for _, c := range counts {
			if c < 1 || c > maxSlots {
				t.Fatalf("count %d", c)
			}
		}
		env := map[string]string{"SLURM_JOB_NODELIST": list, "SLURM_TASKS_PER_NODE": tasks}
		hosts, ok, err := slurmHosts(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if !ok {
			if hosts != nil || err != nil || strings.TrimSpace(list) != "" {
				t.Fatalf("not in Slurm with SLURM_JOB_NODELIST=%q: %v, %v", list, hosts, err)
			}
		} else if err == nil {
			checkParsed(t, hosts, nil)
		} else if !errors.Is(err, ErrHosts) {
			t.Fatalf("error %v does not wrap ErrHosts", err)
		}
	})
}

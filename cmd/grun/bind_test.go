//go:build linux

package main

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func TestBindPlan(t *testing.T) {
	cpus := []int{2, 3, 5, 7}
	tests := []struct {
		name    string
		mode    bindMode
		local   int
		want    []int
		wantErr string
	}{
		{"auto, two ranks", bindAuto, 2, []int{2, 3}, ""},
		{"auto, as many ranks as CPUs", bindAuto, 4, []int{2, 3, 5, 7}, ""},
		{"auto, one rank stays free", bindAuto, 1, nil, ""},
		{"auto, oversubscribed", bindAuto, 5, nil, ""},
		{"auto, no local ranks", bindAuto, 0, nil, ""},
		{"core, one rank", bindCore, 1, []int{2}, ""},
		{"core, oversubscribed", bindCore, 5, nil, "5 ranks on this host but only 4 CPUs"},
		{"none", bindNone, 2, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := bindPlan(tc.mode, tc.local, cpus)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("bindPlan = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestBindTo checks, through the kernel's view of each rank
// (Cpus_allowed_list), that ranks are bound as --bind-to says.
func TestBindTo(t *testing.T) {
	t.Parallel()
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	all := cpuList(cpus)
	show := []string{"--tag-output", "sh", "-c", "grep ^Cpus_allowed_list: /proc/self/status"}
	type want struct {
		code  int
		lists []string // per rank
		err   string
	}
	n := 2
	bound := want{lists: []string{all, all}} // one CPU: 2 ranks do not fit
	if len(cpus) >= 2 {
		bound = want{lists: []string{fmt.Sprint(cpus[0]), fmt.Sprint(cpus[1])}}
	}
	tests := []struct {
		name string
		args []string
		want want
	}{
		{"default binds 2 ranks", []string{"-n", fmt.Sprint(n)}, bound},
		{"none", []string{"-n", fmt.Sprint(n), "--bind-to", "none"}, want{lists: []string{all, all}}},
		{"one rank is left free", []string{"-n", "1"}, want{lists: []string{all}}},
		{"core binds one rank", []string{"-n", "1", "--bind-to", "core"}, want{lists: []string{fmt.Sprint(cpus[0])}}},
		{"more ranks than CPUs are not bound", []string{"-n", fmt.Sprint(len(cpus) + 1)}, want{lists: repeat(all, len(cpus)+1)}},
		{"core refuses more ranks than CPUs", []string{"-n", fmt.Sprint(len(cpus) + 1), "--bind-to", "core"},
			want{code: 2, err: fmt.Sprintf("%d ranks on this host but only %d CPUs", len(cpus)+1, len(cpus))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runGrun(t, append(tc.args, show...)...)
			if res.code != tc.want.code {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", res.code, tc.want.code, res.stderr)
			}
			if tc.want.err != "" {
				if !strings.Contains(res.stderr, tc.want.err) {
					t.Fatalf("stderr does not say %q:\n%s", tc.want.err, res.stderr)
				}
				return
			}
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
				got = append(got, strings.TrimSpace(line))
			}
			sort.Strings(got)
			var wantLines []string
			for r, l := range tc.want.lists {
				wantLines = append(wantLines, fmt.Sprintf("[%d] Cpus_allowed_list:\t%s", r, l))
			}
			sort.Strings(wantLines)
			if !reflect.DeepEqual(got, wantLines) {
				t.Fatalf("ranks report\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantLines, "\n"))
			}
		})
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// cpuList spells cpus as the kernel does in Cpus_allowed_list: ranges of
// consecutive CPUs as "a-b", joined by commas.
func cpuList(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, fmt.Sprint(cpus[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

package wiring

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gocoll/gocoll/collectives"
	envset "github.com/gocoll/gocoll/internal/settings"
)

// fakeHostOf is fakeHost under GOCOLL_FAKE_HOSTS=v, read as Init reads
// it (a value envset refuses is ErrInvalid, as Init makes it).
func fakeHostOf(v string, rank, size int) (int, error) {
	env, err := envset.Read(func(name string) (string, bool) {
		if name == "GOCOLL_FAKE_HOSTS" {
			return v, true
		}
		return "", false
	})
	if err != nil {
		return 0, fmt.Errorf("%w: %w", err, collectives.ErrInvalid)
	}
	return FakeHost(env.FakeHosts, rank, size)
}

// TestFakeHost: GOCOLL_FAKE_HOSTS as a number of hosts or as a list of
// ranks per host, and the layouts it refuses.
func TestFakeHost(t *testing.T) {
	cases := []struct {
		v     string
		size  int
		hosts []int // each rank's host; nil: refused
	}{
		{"2", 4, []int{0, 0, 1, 1}},
		{"3", 5, []int{0, 0, 1, 1, 2}},
		{"1,4", 5, []int{0, 1, 1, 1, 1}},
		{"2,1,3", 6, []int{0, 0, 1, 2, 2, 2}},
		{"4, 1", 5, []int{0, 0, 0, 0, 1}},
		{"1,4", 4, nil},
		{"1,0,3", 4, nil},
		{"0", 2, nil},
		{"two", 2, nil},
		{"1,x", 2, nil},
	}
	for _, tc := range cases {
		for r := range tc.size {
			got, err := fakeHostOf(tc.v, r, tc.size)
			if tc.hosts == nil {
				if !errors.Is(err, collectives.ErrInvalid) {
					t.Errorf("fakeHost(%q, %d, %d) = %d, %v; want ErrInvalid", tc.v, r, tc.size, got, err)
				}
				continue
			}
			if err != nil || got != tc.hosts[r] {
				t.Errorf("fakeHost(%q, %d, %d) = %d, %v; want %d", tc.v, r, tc.size, got, err, tc.hosts[r])
			}
		}
	}
}

package settings

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) Lookup {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// TestRead: each variable's accepted values and its range, the refused
// ones naming the variable and what it wants. A timeout of 1e10 seconds
// (which overflowed to a negative duration, turning the bound off) and
// inf are refused, and so is 1e-12 (which rounded to nothing, which
// meant the 10-minute default).
func TestRead(t *testing.T) {
	cases := []struct {
		name, value string
		check       func(s Settings) bool // nil: refused
	}{
		{"GOCOLL_TIMEOUT", "90", func(s Settings) bool { return s.Timeout == 90*time.Second }},
		{"GOCOLL_TIMEOUT", "1.5", func(s Settings) bool { return s.Timeout == 1500*time.Millisecond }},
		{"GOCOLL_TIMEOUT", " 2m ", func(s Settings) bool { return s.Timeout == 2*time.Minute }},
		{"GOCOLL_TIMEOUT", "1ms", func(s Settings) bool { return s.Timeout == time.Millisecond }},
		{"GOCOLL_TIMEOUT", "8760h", func(s Settings) bool { return s.Timeout == 8760*time.Hour }},
		{"GOCOLL_TIMEOUT", "", func(s Settings) bool { return s.Timeout == 0 }},
		{"GOCOLL_TIMEOUT", "1e10", nil},
		{"GOCOLL_TIMEOUT", "inf", nil},
		{"GOCOLL_TIMEOUT", "+Inf", nil},
		{"GOCOLL_TIMEOUT", "NaN", nil},
		{"GOCOLL_TIMEOUT", "1e-12", nil},
		{"GOCOLL_TIMEOUT", "1ns", nil},
		{"GOCOLL_TIMEOUT", "0", nil},
		{"GOCOLL_TIMEOUT", "-5", nil},
		{"GOCOLL_TIMEOUT", "-1s", nil},
		{"GOCOLL_TIMEOUT", "8761h", nil},
		{"GOCOLL_TIMEOUT", "soon", nil},
		{"GOCOLL_STALL", "off", func(s Settings) bool { return s.StallSet && s.Stall == 0 }},
		{"GOCOLL_STALL", "0", func(s Settings) bool { return s.StallSet && s.Stall == 0 }},
		{"GOCOLL_STALL", "30s", func(s Settings) bool { return s.StallSet && s.Stall == 30*time.Second }},
		{"GOCOLL_STALL", "1e10", nil},
		{"GOCOLL_STALL", "1e-12", nil},
		{"GOCOLL_STALL", "-1", nil},
		{"GOCOLL_STALL", "later", nil},
		{"GOCOLL_MUNGE_SOCKET", "/run/munge/munge.socket.2", func(s Settings) bool { return s.MungeSocket == "/run/munge/munge.socket.2" }},
		{"GOCOLL_MUNGE_SOCKET", "munge.socket.2", nil},
		{"GOCOLL_MUNGE_SOCKET", "/" + strings.Repeat("d", 107), nil},
		{"GOCOLL_SPIN", "0", func(s Settings) bool { return s.SpinSet && s.Spin == -1 }},
		{"GOCOLL_SPIN", "20us", func(s Settings) bool { return s.SpinSet && s.Spin == 20*time.Microsecond }},
		{"GOCOLL_SPIN", "2s", nil},
		{"GOCOLL_SPIN", "-1ms", nil},
		{"GOCOLL_SPIN", "fast", nil},
		{"GOCOLL_SHM_NONTEMPORAL", "off", func(s Settings) bool { return s.SHMNonTemporal == "off" }},
		{"GOCOLL_SHM_NONTEMPORAL", "on", func(s Settings) bool { return s.SHMNonTemporal == "on" }},
		{"GOCOLL_SHM_NONTEMPORAL", "auto", func(s Settings) bool { return s.SHMNonTemporal == "auto" }},
		{"GOCOLL_SHM_NONTEMPORAL", "4096", nil},
		{"GOCOLL_SHM_NONTEMPORAL", "1", nil},
		{"GOCOLL_TRANSPORT", "SHM", func(s Settings) bool { return s.Transport == "shm" }},
		{"GOCOLL_TRANSPORT", "pigeon", nil},
		{"GOCOLL_TCP_CONNECT", "warm", func(s Settings) bool { return s.TCPConnect == "warm" }},
		{"GOCOLL_TCP_CONNECT", "hot", nil},
		{"GOCOLL_RDMA_CONNECT", "eager", func(s Settings) bool { return s.RDMAConnect == "eager" }},
		{"GOCOLL_RDMA_CONNECT", "warm", nil},
		{"GOCOLL_IB_GID_INDEX", "3", func(s Settings) bool { return s.IBGIDIndex == 3 }},
		{"GOCOLL_IB_GID_INDEX", "256", nil},
		{"GOCOLL_IB_GID_INDEX", "-1", nil},
		{"GOCOLL_IB_DEV", "rxe0", func(s Settings) bool { return s.IBDev == "rxe0" }},
		{"GOCOLL_ELASTIC", "yes", func(s Settings) bool { return s.Elastic }},
		{"GOCOLL_ELASTIC", "0", func(s Settings) bool { return !s.Elastic }},
		{"GOCOLL_ELASTIC", "maybe", nil},
		{"GOCOLL_ENCRYPT", "1", func(s Settings) bool { return s.Encrypt }},
		{"GOCOLL_ENCRYPT", " TRUE ", func(s Settings) bool { return s.Encrypt }},
		{"GOCOLL_ENCRYPT", "off", func(s Settings) bool { return !s.Encrypt }},
		{"GOCOLL_ENCRYPT", "aes", nil},
		{"GOCOLL_ENCRYPT", "2", nil},
		{"GOCOLL_FAKE_HOSTS", "2", func(s Settings) bool { return s.FakeHosts.Hosts == 2 }},
		{"GOCOLL_FAKE_HOSTS", "1, 4", func(s Settings) bool { return slices.Equal(s.FakeHosts.PerHost, []int{1, 4}) }},
		{"GOCOLL_FAKE_HOSTS", "0", nil},
		{"GOCOLL_FAKE_HOSTS", "1,0", nil},
		{"GOCOLL_FAKE_HOSTS", "two", nil},
		{"GOCOLL_HALF_ACCUM", "16bit", func(s Settings) bool { return s.HalfAccum == "16bit" }},
		{"GOCOLL_HALF_ACCUM", "fp16", nil},
		{"GOCOLL_DEBUG", "info", func(s Settings) bool { return s.Debug == slog.LevelInfo }},
		{"GOCOLL_DEBUG", "off", func(s Settings) bool { return s.Debug == DebugOff }},
		{"GOCOLL_DEBUG", "verbose", nil},
		{"GOCOLL_SIMD", "avx2", func(s Settings) bool { return s.SIMD == "avx2" }},
		{"GOCOLL_SIMD", "mmx", nil},
		{"GOCOLL_ALGO", "allreduce=ring", func(s Settings) bool { return s.Algo == "allreduce=ring" }},
		{"GOCOLL_TRACE", "/tmp/t-%r", func(s Settings) bool { return s.Trace == "/tmp/t-%r" }},
		{"GOCOLL_QUICK", "1", func(s Settings) bool { return s.Quick }},
		{"GOCOLL_QUICK", "0", func(s Settings) bool { return !s.Quick }},
		{"GOCOLL_CONFORMANCE", "transport", func(s Settings) bool { return s.Conformance == "transport" }},
	}
	for _, tc := range cases {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			s, err := Read(env(map[string]string{tc.name: tc.value}))
			if tc.check == nil {
				var e *Error
				if !errors.As(err, &e) || e.Var != tc.name || e.Value != tc.value || !strings.HasPrefix(err.Error(), tc.name+"=") {
					t.Fatalf("Read = %+v, %v; want an *Error naming %s", s, err, tc.name)
				}
				return
			}
			if err != nil || !tc.check(s) {
				t.Fatalf("Read = %+v, %v", s, err)
			}
		})
	}
}

// TestOneVariable: the functions for one variable parse with Read's row,
// and ignore the others.
func TestOneVariable(t *testing.T) {
	bad := env(map[string]string{"GOCOLL_TIMEOUT": "inf", "GOCOLL_SIMD": "sse2", "GOCOLL_DEBUG": "debug", "GOCOLL_HALF_ACCUM": " 16BIT "})
	if v, err := SIMD(bad); v != "sse2" || err != nil {
		t.Errorf("SIMD = %q, %v", v, err)
	}
	if l, err := Debug(bad); l != slog.LevelDebug || err != nil {
		t.Errorf("Debug = %v, %v", l, err)
	}
	if v, err := HalfAccum(bad); v != "16bit" || err != nil {
		t.Errorf("HalfAccum = %q, %v", v, err)
	}
	if _, err := SIMD(env(map[string]string{"GOCOLL_SIMD": "mmx"})); err == nil {
		t.Error("SIMD(mmx): no error")
	}
	if Quick(env(nil)) || Conformance(env(nil)) != "" {
		t.Error("Quick or Conformance set with nothing in the environment")
	}
	if l, err := Debug(env(nil)); l != slog.LevelWarn || err != nil {
		t.Errorf("Debug with nothing set = %v, %v; want warn, the quiet default", l, err)
	}
	if s, err := Read(env(nil)); s.Debug != slog.LevelWarn || err != nil {
		t.Errorf("Read with nothing set: Debug %v, %v; want warn", s.Debug, err)
	}
	for _, name := range Names() {
		if _, err := one(env(nil), name); err != nil {
			t.Errorf("one(%s): %v", name, err)
		}
	}
}

// TestOnlyHere: no package of the library but this one reads a GOCOLL_*
// variable: every call of os.Getenv or os.LookupEnv, or of a lookup
// function, whose argument is a GOCOLL_ name, outside this package, in
// the library's non-test sources (the programs under cmd/, bench/ and
// examples/ are not the library). And every name those sources mention
// is one Read parses.
func TestOnlyHere(t *testing.T) {
	root := filepath.Join("..", "..")
	reads := regexp.MustCompile(`(Getenv|LookupEnv|lookup)\("GOCOLL_`)
	mention := regexp.MustCompile(`GOCOLL_[A-Z0-9_]*[A-Z0-9]`)
	known := Names()
	var seen int
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case rel == "cmd", rel == "bench", rel == "examples", d.Name() == "testdata", strings.HasPrefix(d.Name(), "."):
				if rel != "." {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		seen++
		if filepath.Dir(rel) == filepath.Join("internal", "settings") {
			return nil
		}
		if m := reads.Find(b); m != nil {
			t.Errorf("%s reads a GOCOLL_ variable itself (%s...): parse it in internal/settings", rel, m)
		}
		for _, name := range mention.FindAllString(string(b), -1) {
			if !slices.Contains(known, name) && !strings.HasSuffix(name, "_") {
				t.Errorf("%s mentions %s, which internal/settings does not read", rel, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 50 {
		t.Fatalf("walked %d Go files under %s: not the module", seen, root)
	}
}

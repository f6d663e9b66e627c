//go:build unix

package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gocoll/gocoll/internal/auth"
)

func TestAdmittedEnv(t *testing.T) {
	tests := []struct {
		name    string
		kvs     []string
		taken   string // the variables taken, space-separated
		dropped string // the names left, space-separated
		bad     string // the entry a refusal must name; "" for none
	}{
		{"grun's and gocoll's", []string{"GRUN_RANK=0", "GOCOLL_ELASTIC=1"}, "GRUN_RANK=0 GOCOLL_ELASTIC=1", "", ""},
		{"the job's -x exports", []string{"GRUN_RANK=0", "OMP_NUM_THREADS=4", "PATH=/opt/bin:/usr/bin"}, "GRUN_RANK=0", "OMP_NUM_THREADS PATH", ""},
		{"LD_PRELOAD", []string{"GRUN_RANK=0", "LD_PRELOAD=/tmp/evil.so"}, "GRUN_RANK=0", "LD_PRELOAD", ""},
		{"loaders", []string{"LD_LIBRARY_PATH=/tmp", "LD_AUDIT=/tmp/a.so", "DYLD_INSERT_LIBRARIES=/tmp/x.dylib", "GCONV_PATH=/tmp", "BASH_ENV=/tmp/rc",
			"BASH_FUNC_ls%%=() { evil; }", "PYTHONSTARTUP=/tmp/x.py", "NODE_OPTIONS=--require /tmp/x.js", "GOFLAGS=-toolexec=/tmp/x", "CC=/tmp/cc"}, "",
			"LD_LIBRARY_PATH LD_AUDIT DYLD_INSERT_LIBRARIES GCONV_PATH BASH_ENV BASH_FUNC_ls%% PYTHONSTARTUP NODE_OPTIONS GOFLAGS CC", ""},
		{"the job's token", []string{"GRUN_TOKEN=another-token-of-the-job"}, "", "GRUN_TOKEN", ""},
		{"no value", []string{"JUSTANAME"}, "", "", "JUSTANAME"},
		{"empty name", []string{"=x"}, "", "", "=x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			taken, dropped, err := admittedEnv(tt.kvs)
			if tt.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tt.bad) {
					t.Fatalf("admittedEnv: %v, want a refusal naming %s", err, tt.bad)
				}
				return
			}
			if err != nil || strings.Join(taken, " ") != tt.taken || strings.Join(dropped, " ") != tt.dropped {
				t.Fatalf("admittedEnv = %q, %q, %v; want %q taken, %q left", taken, dropped, err, tt.taken, tt.dropped)
			}
		})
	}
}

// TestJoinTakesOnlyGrunAndGocoll plays a job's grun that holds the token
// (the one thing a job file gives) and admits a joiner with LD_PRELOAD,
// PATH and a GOCOLL_ variable in its environment: the joining rank runs
// with the GOCOLL_ variable and without the others, and grun --join says
// which it did not take.
func TestJoinTakesOnlyGrunAndGocoll(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	jf := filepath.Join(dir, "job")
	if err := writeJobFile(jf, jobFile{join: ln.Addr().String(), store: "127.0.0.1:1", token: token}); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		if err := auth.Handshake(c, []byte(token), auth.Join, false, time.Now().Add(10*time.Second)); err != nil {
			served <- err
			return
		}
		r := bufio.NewReader(c)
		if typ, _, err := readJoinFrame(r); err != nil || typ != frameHello {
			served <- errors.New("no hello from the joiner")
			return
		}
		writeJoinFrame(c, frameAdmit, []byte("1\x00GRUN_RANK=0\x00GOCOLL_TEST_SENT=yes\x00LD_PRELOAD="+filepath.Join(dir, "evil.so")+"\x00PATH="+dir))
		// The joiner relays its rank's life until the exit frame.
		for {
			typ, _, err := readJoinFrame(r)
			if err != nil {
				served <- fmt.Errorf("the joiner hung up before its exit frame: %w", err)
				return
			}
			if typ == frameExit {
				served <- nil
				return
			}
		}
	}()
	out := filepath.Join(dir, "env")
	res := runGrun(t, "--join", jf, "/bin/sh", "-c", "env > "+out)
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if res.code != 0 || !strings.Contains(res.stderr, "not taking the job's LD_PRELOAD, PATH") {
		t.Fatalf("grun --join exited %d, want 0, saying it did not take LD_PRELOAD and PATH; stderr:\n%s", res.code, res.stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	env := "\n" + string(b)
	if !strings.Contains(env, "\nGOCOLL_TEST_SENT=yes\n") || strings.Contains(env, "evil.so") || strings.Contains(env, "\nPATH="+dir+"\n") {
		t.Fatalf("the joining rank's environment:\n%s\nwant GOCOLL_TEST_SENT from the job, and not its LD_PRELOAD or PATH", b)
	}
}

//go:build unix

package main

import (
	"bufio"
	"errors"
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
		name string
		kvs  []string
		bad  string // the variable the refusal must name; "" for accepted
	}{
		{"grun's and gocoll's and -x", []string{"GRUN_RANK=0", "GOCOLL_ELASTIC=1", "OMP_NUM_THREADS=4", "PATH=/opt/bin:/usr/bin"}, ""},
		{"LD_PRELOAD", []string{"GRUN_RANK=0", "LD_PRELOAD=/tmp/evil.so"}, "LD_PRELOAD"},
		{"LD_LIBRARY_PATH", []string{"LD_LIBRARY_PATH=/tmp"}, "LD_LIBRARY_PATH"},
		{"LD_AUDIT", []string{"LD_AUDIT=/tmp/a.so"}, "LD_AUDIT"},
		{"DYLD_INSERT_LIBRARIES", []string{"DYLD_INSERT_LIBRARIES=/tmp/x.dylib"}, "DYLD_INSERT_LIBRARIES"},
		{"GCONV_PATH", []string{"GCONV_PATH=/tmp"}, "GCONV_PATH"},
		{"BASH_ENV", []string{"BASH_ENV=/tmp/rc"}, "BASH_ENV"},
		{"exported bash function", []string{"BASH_FUNC_ls%%=() { evil; }"}, "BASH_FUNC_ls%%"},
		{"PYTHONSTARTUP", []string{"PYTHONSTARTUP=/tmp/x.py"}, "PYTHONSTARTUP"},
		{"NODE_OPTIONS", []string{"NODE_OPTIONS=--require /tmp/x.js"}, "NODE_OPTIONS"},
		{"the job's token", []string{"GRUN_TOKEN=another-token-of-the-job"}, "GRUN_TOKEN"},
		{"no value", []string{"JUSTANAME"}, "JUSTANAME"},
		{"empty name", []string{"=x"}, "=x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := admittedEnv(tt.kvs)
			if tt.bad == "" {
				if err != nil || strings.Join(got, " ") != strings.Join(tt.kvs, " ") {
					t.Fatalf("admittedEnv = %q, %v; want all of them", got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.bad) {
				t.Fatalf("admittedEnv: %v, want a refusal naming %s", err, tt.bad)
			}
		})
	}
}

// TestJoinRefusesLoaderVariables plays a job's grun that holds the token
// (the one thing a job file gives) and admits a joiner with LD_PRELOAD in
// its environment: the joiner refuses, naming the variable, and starts
// nothing.
func TestJoinRefusesLoaderVariables(t *testing.T) {
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
		writeJoinFrame(c, frameAdmit, []byte("1\x00GRUN_RANK=0\x00LD_PRELOAD="+filepath.Join(dir, "evil.so")))
		// The joiner hangs up without a pid frame: it started nothing.
		typ, _, err := readJoinFrame(r)
		if err == nil {
			served <- errors.New("the joiner sent frame " + string(typ) + " after a refused admission")
			return
		}
		served <- nil
	}()
	marker := filepath.Join(dir, "ran")
	res := runGrun(t, "--join", jf, "/bin/sh", "-c", "touch "+marker)
	if res.code != exitRefused || !strings.Contains(res.stderr, "sent LD_PRELOAD") {
		t.Fatalf("grun --join exited %d, want %d, saying it refused LD_PRELOAD; stderr:\n%s", res.code, exitRefused, res.stderr)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the program ran (%v)", err)
	}
}

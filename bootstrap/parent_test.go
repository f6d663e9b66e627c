//go:build unix

package bootstrap

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary play a launcher and its rank for
// TestWatchParent, and another user's listener for
// TestStoreOfAnotherUser.
func TestMain(m *testing.M) {
	switch os.Getenv("BOOTSTRAP_TEST_ROLE") {
	case "launcher":
		// Start the rank and stay, as mpirun or torchrun would.
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "BOOTSTRAP_TEST_ROLE=rank")
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println(cmd.Process.Pid)
		select {}
	case "listener":
		// A port held by whoever runs this (TestStoreOfAnotherUser runs
		// it as nobody): it says its address, then how many bytes the
		// one connection it takes sent it.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println(ln.Addr())
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		b, _ := io.ReadAll(c)
		fmt.Printf("got=%d\n", len(b))
		os.Exit(0)
	case "rank":
		out := os.Getenv("BOOTSTRAP_TEST_OUT")
		gone := make(chan int)
		WatchParent(50*time.Millisecond, func(p int) { gone <- p })
		os.WriteFile(out+".ready", nil, 0o600)
		select {
		case p := <-gone:
			os.WriteFile(out, []byte(fmt.Sprint(p)), 0o600)
			os.Exit(0)
		case <-time.After(time.Minute):
			os.Exit(3)
		}
	}
	os.Exit(m.Run())
}

// TestWatchParent: a rank whose launcher is SIGKILLed hears of it.
func TestWatchParent(t *testing.T) {
	out := filepath.Join(t.TempDir(), "gone")
	launcher := exec.Command(os.Args[0], "-test.run=^$")
	launcher.Env = append(os.Environ(), "BOOTSTRAP_TEST_ROLE=launcher", "BOOTSTRAP_TEST_OUT="+out)
	stdout, err := launcher.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := launcher.Start(); err != nil {
		t.Fatal(err)
	}
	var rank int
	if _, err := fmt.Fscan(stdout, &rank); err != nil {
		launcher.Process.Kill()
		t.Fatal(err)
	}
	defer syscall.Kill(rank, syscall.SIGKILL)
	waitFile(t, out+".ready")
	launcher.Process.Kill()
	launcher.Wait()
	killed := time.Now()
	waitFile(t, out)
	b, _ := os.ReadFile(out)
	if got := strings.TrimSpace(string(b)); got != fmt.Sprint(launcher.Process.Pid) {
		t.Fatalf("rank reported parent %s gone, want %d", got, launcher.Process.Pid)
	}
	t.Logf("the rank noticed its launcher's death after %v", time.Since(killed).Round(time.Millisecond))
}

func waitFile(t *testing.T, name string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(name); err == nil && (strings.HasSuffix(name, ".ready") || len(b) > 0) {
			return
		}
	}
	t.Fatalf("%s did not appear in 30s", name)
}

// TestWatchParentStop: a stopped watch never calls back.
func TestWatchParentStop(t *testing.T) {
	called := make(chan int, 1)
	stop := WatchParent(time.Millisecond, func(p int) { called <- p })
	stop()
	stop()
	select {
	case p := <-called:
		t.Fatalf("called with %d while the parent lives", p)
	case <-time.After(50 * time.Millisecond):
	}
}

// Command rankctl is a rank that misbehaves on request, for grun's tests of
// failures and signals. Every rank writes its pid to DIR/rank-R.pid once it
// is set up (signal handling in place, child started), so a test that sees
// all the files knows the job is ready. Then the rank named by -fail-rank
// or -kill-rank waits for -ready pid files and fails; the others sleep,
// and so does a replacement of a rank (its pid file exists already),
// which writes DIR/replacement-R.pid instead.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

func main() {
	dir := flag.String("dir", "", "where to write pid files")
	ready := flag.Int("ready", 0, "pid files to wait for before failing")
	failRank := flag.Int("fail-rank", -1, "rank that exits with -code")
	code := flag.Int("code", 1, "exit status of -fail-rank")
	killRank := flag.Int("kill-rank", -1, "rank that kills itself with SIGKILL")
	child := flag.Bool("child", false, "start a child process that sleeps, pid in DIR/child-R.pid")
	ignoreTerm := flag.Bool("ignore-term", false, "ignore SIGTERM")
	record := flag.Bool("record", false, "on SIGINT, SIGTERM or SIGHUP write its name to DIR/sig-R and exit 0")
	sleep := flag.Duration("sleep", 60*time.Second, "how long to sleep")
	sleeper := flag.Bool("sleeper", false, "just sleep (the child)")
	follow := flag.Bool("follow", false, "other ranks exit with status 4 once -fail-rank is gone, as ranks that notice a lost peer do")
	flag.Parse()
	if *sleeper {
		time.Sleep(*sleep)
		return
	}
	rank, err := strconv.Atoi(os.Getenv("GRUN_RANK"))
	if err != nil || *dir == "" {
		fail("need GRUN_RANK and -dir")
	}

	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	if *record {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		go func() {
			sig := <-sigs
			writeFile(filepath.Join(*dir, fmt.Sprintf("sig-%d", rank)), sig.String())
			os.Exit(0)
		}()
	}
	if *child {
		self, err := os.Executable()
		if err != nil {
			fail(err.Error())
		}
		cmd := exec.Command(self, "-sleeper", "-sleep", sleep.String())
		if err := cmd.Start(); err != nil {
			fail(err.Error())
		}
		writeFile(filepath.Join(*dir, fmt.Sprintf("child-%d.pid", rank)), strconv.Itoa(cmd.Process.Pid))
	}
	if _, err := os.Stat(filepath.Join(*dir, fmt.Sprintf("rank-%d.pid", rank))); err == nil {
		// A replacement grun started (--elastic MIN:MAX): it sleeps.
		writeFile(filepath.Join(*dir, fmt.Sprintf("replacement-%d.pid", rank)), strconv.Itoa(os.Getpid()))
		time.Sleep(*sleep)
		return
	}
	writeFile(filepath.Join(*dir, fmt.Sprintf("rank-%d.pid", rank)), strconv.Itoa(os.Getpid()))

	if rank == *failRank || rank == *killRank {
		waitReady(*dir, *ready)
		fmt.Printf("rank %d failing\n", rank)
		if rank == *killRank {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		os.Exit(*code)
	}
	if *follow && *failRank >= 0 {
		waitReady(*dir, *ready)
		b, err := os.ReadFile(filepath.Join(*dir, fmt.Sprintf("rank-%d.pid", *failRank)))
		pid, _ := strconv.Atoi(string(b))
		if err != nil || pid <= 0 {
			fail("no pid file of the failing rank")
		}
		deadline := time.Now().Add(*sleep)
		for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil {
			time.Sleep(2 * time.Millisecond)
		}
		fmt.Printf("rank %d noticed rank %d is gone\n", rank, *failRank)
		// Real ranks take a while to give up on a lost peer; exiting the
		// instant grun reaps the failed rank would race grun's own
		// bookkeeping of that reap, which no launcher can order exactly.
		time.Sleep(30 * time.Millisecond)
		os.Exit(4)
	}
	time.Sleep(*sleep)
}

func waitReady(dir string, n int) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		m, _ := filepath.Glob(filepath.Join(dir, "rank-*.pid"))
		if len(m) >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	fail("the other ranks never got ready")
}

// writeFile renames into place so that readers never see a partial file.
func writeFile(path, content string) {
	if err := os.WriteFile(path+".tmp", []byte(content), 0o644); err != nil {
		fail(err.Error())
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "rankctl:", msg)
	os.Exit(99)
}

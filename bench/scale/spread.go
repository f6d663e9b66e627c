//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
	"github.com/gocoll/gocoll/comm"
)

// tokenEnv carries the job's token to the -block processes; an argument
// would show it to every user of the machine through ps.
const tokenEnv = "SCALE_TOKEN"

// spreadJob runs n goroutine ranks in procs processes of this program,
// contiguous blocks of ranks each, against a store in this process.
func spreadJob(n, procs int, transport string, timeout time.Duration) ([]sample, error) {
	if procs > n {
		procs = n
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var secret [32]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return nil, err
	}
	token := hex.EncodeToString(secret[:])
	srv, err := bootstrap.Listen("127.0.0.1:0", []byte(token))
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	// One process failing leaves the others waiting for its ranks until
	// the timeout: end them all at once instead.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var (
		mu    sync.Mutex
		ss    []sample
		errs  []error
		wg    sync.WaitGroup
		first int
	)
	for i := range procs {
		count := n / procs
		if i < n%procs {
			count++
		}
		spec := fmt.Sprintf("%d:%d", first, count)
		first += count
		cmd := exec.CommandContext(ctx, self, "-block", spec, "-n", strconv.Itoa(n), "-addr", srv.Addr(),
			"-transport", transport, "-timeout", timeout.String())
		cmd.Env = append(os.Environ(), tokenEnv+"="+token)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := readSamples(out)
			err := cmd.Wait()
			mu.Lock()
			defer mu.Unlock()
			ss = append(ss, got...)
			if err == nil && len(got) != count {
				err = fmt.Errorf("%d of %d ranks reported", len(got), count)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("ranks %s: %v: %s", spec, err, lastLines(stderr.String(), 2)))
				cancel()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return ss, nil
}

func readSamples(r io.Reader) []sample {
	var ss []sample
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "scale-sample "); ok {
			var s sample
			if json.Unmarshal([]byte(rest), &s) == nil {
				ss = append(ss, s)
			}
		}
	}
	return ss
}

// blockRanks is one process of spreadJob: ranks first to first+count-1
// of a job of size ranks. Each rank's figures are timed as childRank's
// are; descriptors and memory are this process's, less what it held
// before its first rank started, divided among its ranks.
func blockRanks(spec, size, addr, transport string, timeout time.Duration, stdout, stderr io.Writer) int {
	first, count, ok := parseBlock(spec)
	n, err := strconv.Atoi(size)
	if !ok || err != nil || first+count > n || addr == "" {
		fmt.Fprintf(stderr, "scale: -block %q -n %q -addr %q: want first:count inside a job of n ranks, and its store\n", spec, size, addr)
		return 2
	}
	raiseFDLimit()
	token := []byte(os.Getenv(tokenEnv))
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	fds0, rss0, reqs0 := openFDs(), rssKiB(), bootstrap.Requests()
	cs := make([]*comm.Communicator, count)
	ss := make([]sample, count)
	// The first rank to fail is the cause; the rest fail because it
	// cancelled them.
	var (
		cause error
		once  sync.Once
		wg    sync.WaitGroup
	)
	each := func(f func(i int) error) error {
		for i := range count {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f(i); err != nil {
					once.Do(func() { cause = err })
					cancel()
				}
			}()
		}
		wg.Wait()
		return cause
	}
	defer each(func(i int) error {
		if cs[i] != nil {
			cs[i].Close()
		}
		return nil
	})
	err = each(func(i int) error {
		r := first + i
		cfg := comm.Config{Rank: r, Size: n, LocalRank: r, LocalSize: n, Addr: addr, Token: token, Source: "scale"}
		t0 := time.Now()
		c, err := comm.New(ctx, cfg, comm.WithTransport(transport))
		ss[i] = sample{Rank: r, Init: time.Since(t0)}
		cs[i] = c
		return err
	})
	if err == nil {
		err = each(func(i int) error {
			t1 := time.Now()
			err := comm.AllReduce(ctx, cs[i], []float32{1, 2}, comm.Sum)
			ss[i].First = time.Since(t1)
			return err
		})
	}
	if err != nil {
		fmt.Fprintln(stderr, "scale:", cause)
		return 1
	}
	fds, rss := (openFDs()-fds0)/count, (rssKiB()-rss0)/int64(count)
	for i := range ss {
		ss[i].FDs, ss[i].RSS = fds, rss
	}
	ss[0].Reqs = bootstrap.Requests() - reqs0
	// Every rank of the job measured before any closes: an allreduce, as
	// the first was, over the links that one made; Barrier's
	// dissemination partners would be new links, and so descriptors the
	// process may not have.
	if err := each(func(i int) error { return comm.AllReduce(ctx, cs[i], []float32{0}, comm.Sum) }); err != nil {
		fmt.Fprintln(stderr, "scale:", cause)
		return 1
	}
	for _, s := range ss {
		b, _ := json.Marshal(s)
		fmt.Fprintf(stdout, "scale-sample %s\n", b)
	}
	return 0
}

func parseBlock(spec string) (first, count int, ok bool) {
	a, b, found := strings.Cut(spec, ":")
	first, err1 := strconv.Atoi(a)
	count, err2 := strconv.Atoi(b)
	return first, count, found && err1 == nil && err2 == nil && first >= 0 && count >= 1
}

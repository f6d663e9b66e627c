// Command storeping checks grun's environment contract end to end: it reads
// its configuration with bootstrap.FromEnv, dials the rendezvous store with
// the token, publishes its rank and reads every other rank's, printing
// "rank R sees P=VALUE" for each. With -intruder, rank 0 first tries the
// store with a wrong token and prints "intruder refused" if it is turned
// away.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/gocoll/gocoll/bootstrap"
)

func main() {
	intruder := flag.Bool("intruder", false, "rank 0 also dials with a wrong token")
	flag.Parse()
	cfg, err := bootstrap.FromEnv(os.LookupEnv)
	if err != nil {
		fail(err)
	}
	if cfg.Serve || len(cfg.Token) == 0 || cfg.LocalRank != cfg.Rank || cfg.LocalSize != cfg.Size {
		fail(fmt.Errorf("unexpected config under grun: %+v", cfg))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if *intruder && cfg.Rank == 0 {
		c, err := bootstrap.Dial(ctx, cfg.Addr, []byte("not the token"))
		if err == nil {
			// Depending on timing the refusal may only show on first use.
			_, err = c.Get(ctx, "x")
			c.Close()
		}
		if err == nil {
			fail(fmt.Errorf("the store let a wrong token in"))
		}
		fmt.Println("intruder refused")
	}

	c, err := bootstrap.Dial(ctx, cfg.Addr, cfg.Token)
	if err != nil {
		fail(err)
	}
	defer c.Close()
	if err := c.Put(ctx, fmt.Sprintf("rank/%d", cfg.Rank), []byte(fmt.Sprintf("hello-from-%d", cfg.Rank))); err != nil {
		fail(err)
	}
	for p := 0; p < cfg.Size; p++ {
		if p == cfg.Rank {
			continue
		}
		v, err := c.Get(ctx, fmt.Sprintf("rank/%d", p))
		if err != nil {
			fail(err)
		}
		fmt.Printf("rank %d sees %d=%s\n", cfg.Rank, p, v)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "storeping:", err)
	os.Exit(1)
}

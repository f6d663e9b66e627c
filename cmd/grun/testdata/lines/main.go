// Command lines floods stdout and stderr with checkable lines, for grun's
// output forwarding tests. Every stdout line is "rank=R line=K payload=P"
// where P is Payload(K); then comes one "rank=R long=xxx..." line of -long
// x's, and last "rank=R tail" without a newline. Stderr gets -errs lines
// "rank=R err=K". Writes go through a small odd-sized buffer so that lines
// reach grun cut at arbitrary places.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	n := flag.Int("n", 1000, "stdout lines")
	long := flag.Int("long", 0, "length of the long line (0: none)")
	errs := flag.Int("errs", 10, "stderr lines")
	flag.Parse()
	rank := os.Getenv("GRUN_RANK")

	out := bufio.NewWriterSize(os.Stdout, 777)
	errw := bufio.NewWriterSize(os.Stderr, 333)
	for k := 0; k < *n; k++ {
		fmt.Fprintf(out, "rank=%s line=%d payload=%s\n", rank, k, payload(k))
		if k < *errs {
			fmt.Fprintf(errw, "rank=%s err=%d\n", rank, k)
		}
	}
	if *long > 0 {
		fmt.Fprintf(out, "rank=%s long=%s\n", rank, strings.Repeat("x", *long))
	}
	fmt.Fprintf(out, "rank=%s tail", rank)
	out.Flush()
	errw.Flush()
}

// payload must match the test's copy.
func payload(k int) string {
	return strings.Repeat(string(rune('a'+k%26)), k%97)
}

//go:build !unix

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "scale: reads /proc and raises RLIMIT_NOFILE: it runs on Linux")
	os.Exit(1)
}

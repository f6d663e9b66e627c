// Command envdump prints the environment grun gave its rank, for grun's
// tests: one "RANK NAME=VALUE" line per variable (NAME unset when it is
// not set), for the GRUN_* variables and each NAME given as an argument.
package main

import (
	"fmt"
	"os"
)

func main() {
	names := []string{"GRUN_RANK", "GRUN_SIZE", "GRUN_LOCAL_RANK", "GRUN_LOCAL_SIZE", "GRUN_ADDR", "GRUN_TOKEN"}
	names = append(names, os.Args[1:]...)
	rank := os.Getenv("GRUN_RANK")
	for _, name := range names {
		if v, ok := os.LookupEnv(name); ok {
			fmt.Printf("%s %s=%s\n", rank, name, v)
		} else {
			fmt.Printf("%s %s unset\n", rank, name)
		}
	}
}

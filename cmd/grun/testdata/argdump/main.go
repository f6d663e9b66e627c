// Command argdump prints, as JSON, the arguments, working directory and
// environment it was started with, for grun's tests of remote commands:
// whatever the quoting did must come out exactly as it went in.
package main

import (
	"encoding/json"
	"os"
)

func main() {
	wd, err := os.Getwd()
	if err != nil {
		wd = "error: " + err.Error()
	}
	json.NewEncoder(os.Stdout).Encode(struct {
		Args []string
		Dir  string
		Env  []string
	}{os.Args[1:], wd, os.Environ()})
}

//go:build !unix

package comm

import "os"

// terminate ends this process; without signals there is nothing a program
// could catch, so it exits at once, its reason already logged.
func terminate() { os.Exit(1) }

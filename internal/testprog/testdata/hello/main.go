// Command hello is the program testprog's tests build.
package main

import "fmt"

func main() { fmt.Println("hello from a kept program") }

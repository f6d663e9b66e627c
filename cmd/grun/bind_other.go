//go:build !linux

package main

import "errors"

func allowedCPUs() ([]int, error) {
	return nil, errors.New("binding ranks to CPUs is implemented on Linux only")
}

func startOnCPU(cpu int, start func() error) error { return start() }

//go:build !linux

package main

func machineCPUs() int  { return 0 }
func boundCPUs() string { return "" }

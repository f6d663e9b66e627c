//go:build race

package main

// raceEnabled makes TestMain build grun with the race detector too when the
// tests run with it, so the subprocess runs are checked as well.
const raceEnabled = true

package conformance

import (
	"runtime"
	"testing"
)

// SoleP checks what a transport's spinning wait owes the other goroutines
// of a rank that has a single P (GOMAXPROCS=1, as grun's binding to one
// CPU gives). In each of 5 rounds, run starts a goroutine and then waits
// (with a spin far longer than the test, so that the wait never blocks)
// until it sees that goroutine's work, calling poll at each of its polls;
// the work must be seen within 2·within+1 polls. The poll that sees it
// is the one after the goroutine's turn, and a turn may go to the wait
// itself first (one in 61 goes to the global run queue first, where the
// wait is: the runtime's fairness), so the goroutine may need a second
// one. The polls are counted, not timed: with one P the other goroutine
// runs only when the wait hands the P over, so the count holds whatever
// the machine's load. A wait that never gave the scheduler a turn keeps
// the P until the runtime preempts it, 10 ms on: thousands of polls.
func SoleP(t *testing.T, within int, run func(round int, poll func()) error) {
	t.Helper()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for round := range 5 {
		polls := 0
		if err := run(round, func() { polls++ }); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if want := 2*within + 1; polls > want {
			t.Errorf("round %d: with GOMAXPROCS=1 the other goroutine's work was seen only after %d polls of the wait, want at most %d", round, polls, want)
		}
	}
}

package comm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestFaultNamesCallToCome: a fault the watchdog sees while a call is
// issued but not yet numbered names that call, "#2 (not started)", not
// call #1, which returned: the "allreduce #28 ... rank 2 died, where the
// others said #29" seen at load. While a numbered call runs, the fault
// names it.
func TestFaultNamesCallToCome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := NewLocal(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := cs[0]
	defer c.Close()
	if err := AllReduce(ctx, c, []float64{1}, Sum); err != nil {
		t.Fatal(err)
	}
	died := errors.New("rank 2 died")
	if c.latestRunning() {
		t.Fatal("call #1 returned, but counts as running")
	}
	var ce *CallError
	if err := c.callError("", c.latestRunning(), died); !errors.As(err, &ce) || ce.Call != "call #2 (not started)" {
		t.Errorf("fault between calls: %v (call %q), want call #2 (not started)", err, ce.Call)
	}
	// Call #1 numbered and not yet returned (as while it runs): it is
	// the one the fault names.
	c.ext.ended.Store(0)
	if !c.latestRunning() {
		t.Fatal("call #1 numbered and not ended, but not running")
	}
	if err := c.callError("", c.latestRunning(), died); !errors.As(err, &ce) || !strings.HasPrefix(ce.Call, "allreduce #1 ") {
		t.Errorf("fault in call #1: %v (call %q), want allreduce #1", err, ce.Call)
	}
}

package comm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// A SendRecv whose halves both failed says one line, the send's, and
// errors.Is finds either half's sentinel.
func TestSendRecvBothFailed(t *testing.T) {
	send := fmt.Errorf("comm: rank 0: send to rank 1 tag 3: %w", ErrPeerLost)
	recv := fmt.Errorf("comm: rank 0: recv from rank 7 tag 3: %w", ErrTimeout)
	var err error = &bothFailed{send, recv}
	if got := err.Error(); strings.Contains(got, "\n") || got != send.Error() {
		t.Errorf("Error() = %q, want the send's one line %q", got, send.Error())
	}
	for _, target := range []error{ErrPeerLost, ErrTimeout} {
		if !errors.Is(err, target) {
			t.Errorf("errors.Is(%v) = false", target)
		}
	}
}

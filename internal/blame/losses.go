package blame

import "github.com/gocoll/gocoll/transport"

// Also is an error that reads as cause and matches both cause and then:
// a mismatch found after a peer's link was lost is the cause, the loss
// its consequence.
func Also(cause, then error) error { return also{cause, then} }

type also struct{ cause, then error }

func (e also) Error() string   { return e.cause.Error() }
func (e also) Unwrap() []error { return []error{e.cause, e.then} }

// Lost is the peers a transport.LossNotifier's LostErr names.
func Lost(err error) []*transport.PeerError {
	switch lost := err.(type) {
	case *transport.PeerError:
		return []*transport.PeerError{lost}
	case transport.Losses:
		return lost
	}
	return nil
}

//go:build !unix

package tcp

// Without the engine (engine_stub.go) no link is ever made: the tests'
// counters are zero, so that the tests still build (TestCrossBuild vets
// them for Windows).

func (t *Transport) Links() int          { return 0 }
func (t *Transport) AddressLookups() int { return 0 }
func (t *Transport) Refused() int        { return 0 }

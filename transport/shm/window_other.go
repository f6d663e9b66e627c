//go:build !linux

package shm

import "fmt"

// Window is memory the ranks of a host map and read in place; none can
// be made on this system (see window_linux.go).
type Window struct{}

// WindowRef is what a peer needs to map a Window.
type WindowRef struct {
	PID, FD int
	Tag     string
}

// NewWindow fails with an error wrapping ErrUnsupported: windows are
// Linux's memfds.
func NewWindow(size int) (*Window, error) {
	return nil, fmt.Errorf("shm: window of %d bytes: %w", size, errNotLinux)
}

// Bytes is the creator's mapping of the window.
func (w *Window) Bytes() []byte { return nil }

// Ref is what the peers pass to OpenWindow.
func (w *Window) Ref() WindowRef { return WindowRef{} }

// Seal closes the creator's descriptor.
func (w *Window) Seal() {}

// Drop unmaps the window, for a creator that never handed it out.
func (w *Window) Drop() error { return nil }

// Retire drops the creator's mapping of the window.
func (w *Window) Retire() error { return nil }

// OpenWindow fails with an error wrapping ErrUnsupported.
func OpenWindow(ref WindowRef, size int) ([]byte, error) {
	return nil, fmt.Errorf("shm: open a window: %w", errNotLinux)
}

// Unmap drops a peer's window that OpenWindow mapped.
func Unmap(mem []byte) error { return nil }

// Package safetext makes text that came from another process safe to put
// into our errors and logs: a peer, even an authenticated one, must not be
// able to write control characters or invalid UTF-8 into them.
package safetext

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Printable returns b as a string with every rune that is not printable
// (C0 and C1 controls, format characters such as bidirectional overrides,
// line separators) and every byte that is not valid UTF-8 replaced by '?'.
func Printable(b []byte) string {
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, string(b))
}

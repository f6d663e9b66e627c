package safetext

import "testing"

func TestPrintable(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"rank 3 gave up: timeout", "rank 3 gave up: timeout"},
		{"two\nlines\ttab\x00nul\x7fdel\x1b[31m", "two?lines?tab?nul?del?[31m"},
		{"bad \xff\xfe utf-8", "bad ?? utf-8"},
		{"ünïcode ok", "ünïcode ok"},
		{"c1 \u0080 \u009b control", "c1 ? ? control"},
		{"bidi \u202e override, line\u2028sep", "bidi ? override, line?sep"},
	}
	for _, tt := range tests {
		if got := Printable([]byte(tt.in)); got != tt.want {
			t.Errorf("Printable(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
)

// chunkReader returns its chunks one Read at a time, the way a pipe hands
// over whatever the writer has written so far.
type chunkReader struct{ chunks []string }

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	if c.chunks[0] == "" {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}

func TestForwardLines(t *testing.T) {
	long := strings.Repeat("y", maxLine)
	tests := []struct {
		name   string
		chunks []string
		prefix string
		want   []string // what each emit got
	}{
		{"empty", nil, "[0] ", nil},
		{"one line", []string{"hello\n"}, "[0] ", []string{"[0] hello\n"}},
		{"no prefix", []string{"a\nb\n"}, "", []string{"a\nb\n"}},
		{"lines batched per read", []string{"a\nb\nc"}, "[1] ", []string{"[1] a\n[1] b\n", "[1] c\n"}},
		{"line across reads", []string{"he", "ll", "o\nwor", "ld\n"}, "[2] ", []string{"[2] hello\n", "[2] world\n"}},
		{"no final newline", []string{"last"}, "[3] ", []string{"[3] last\n"}},
		{"empty lines", []string{"\n\n"}, "[4] ", []string{"[4] \n[4] \n"}},
		{"exactly maxLine", []string{long, "\n"}, "", []string{long + "\n"}},
		{"over maxLine", []string{long, "zz\n"}, "[5] ", []string{"[5] " + long + "\n[5] zz\n"}},
		{"over maxLine without newline", []string{long + "zz"}, "", []string{long + "\n", "zz\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			forwardLines(&chunkReader{chunks: append([]string(nil), tc.chunks...)}, []byte(tc.prefix), func(p []byte) {
				got = append(got, string(p))
			})
			if len(got) != len(tc.want) {
				t.Fatalf("%d emits, want %d: %.200q", len(got), len(tc.want), got)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("emit %d: %.200q, want %.200q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// A line several times maxLine comes through whole, if cut into pieces.
func TestForwardLinesHuge(t *testing.T) {
	line := strings.Repeat("0123456789", 3*maxLine/10+7)
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(line + "\nafter\n"))
		pw.Close()
	}()
	var out bytes.Buffer
	forwardLines(pr, []byte("[0] "), func(p []byte) { out.Write(p) })
	pieces := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(pieces) != 5 || pieces[4] != "[0] after" {
		t.Fatalf("got %d lines, want 4 pieces and \"after\"", len(pieces))
	}
	var joined strings.Builder
	for _, p := range pieces[:4] {
		if !strings.HasPrefix(p, "[0] ") || len(p) > len("[0] ")+maxLine {
			t.Fatalf("piece of %d bytes starting %.20q", len(p), p)
		}
		joined.WriteString(p[len("[0] "):])
	}
	if joined.String() != line {
		t.Error("the pieces do not add up to the line")
	}
}

// Many sources through one output never mix their lines.
func TestOutputSerializes(t *testing.T) {
	var buf bytes.Buffer
	o := &output{stdout: &buf, stderr: &buf}
	var wg sync.WaitGroup
	for r := 0; r < 8; r++ {
		pr, pw := io.Pipe()
		wg.Add(2)
		go func() {
			defer wg.Done()
			for k := 0; k < 500; k++ {
				// Written in two halves, so lines arrive split.
				line := fmt.Sprintf("r%d k%d %s\n", r, k, strings.Repeat("z", k))
				pw.Write([]byte(line[:len(line)/2]))
				pw.Write([]byte(line[len(line)/2:]))
			}
			pw.Close()
		}()
		go func() {
			defer wg.Done()
			w := o.stdout
			if r%2 == 1 {
				w = o.stderr
			}
			forwardLines(pr, []byte(fmt.Sprintf("[%d] ", r)), func(p []byte) { o.write(w, p) })
		}()
	}
	wg.Wait()
	next := make([]int, 8)
	for _, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		var r, r2, k int
		var z string
		if _, err := fmt.Sscanf(line, "[%d] r%d k%d %s", &r, &r2, &k, &z); err != nil && k != 0 {
			t.Fatalf("mangled line %q: %v", line, err)
		}
		if r != r2 || k != next[r] || z != strings.Repeat("z", k) {
			t.Fatalf("line %q, want source %d line %d", line, r, next[r])
		}
		next[r]++
	}
	for r, n := range next {
		if n != 500 {
			t.Errorf("source %d: %d lines", r, n)
		}
	}
}

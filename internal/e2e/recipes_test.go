package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocoll/gocoll/internal/testmode"
)

// readmeRecipe is the recipe README.md's launcher table gives for launcher
// (the row's first cell, exactly): the first code span of its second cell,
// with the table's escaped pipes restored. Tests run it as written, so the
// README cannot promise a command CI did not run.
func readmeRecipe(t *testing.T, launcher string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		cells := splitRow(line)
		if len(cells) < 2 || cells[0] != launcher {
			continue
		}
		_, rest, ok := strings.Cut(cells[1], "`")
		code, _, ok2 := strings.Cut(rest, "`")
		if !ok || !ok2 || code == "" {
			t.Fatalf("README.md: the %q row's recipe %q holds no `code`", launcher, cells[1])
		}
		return code
	}
	t.Fatalf("README.md has no launcher table row %q", launcher)
	return ""
}

// splitRow splits a Markdown table row at the pipes that are not escaped,
// trimming each cell and unescaping "\|".
func splitRow(line string) []string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
		return nil
	}
	var cells []string
	var cur strings.Builder
	body := line[1 : len(line)-1]
	for i := 0; i < len(body); i++ {
		switch {
		case body[i] == '\\' && i+1 < len(body) && body[i+1] == '|':
			cur.WriteByte('|')
			i++
		case body[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(body[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

func TestReadmeRecipe(t *testing.T) {
	testmode.SkipIfQuick(t)
	if got := splitRow("| a \\| b | `x \\| y` |"); len(got) != 2 || got[0] != "a | b" || got[1] != "`x | y`" {
		t.Fatalf("splitRow = %q", got)
	}
	for _, l := range []string{"Slurm", "Open MPI", "torchrun --standalone", "torchrun c10d", "torchrun static"} {
		if r := readmeRecipe(t, l); !strings.Contains(r, "./train") {
			t.Errorf("%s recipe %q does not run ./train", l, r)
		}
	}
	if r := readmeRecipe(t, "Open MPI"); !strings.Contains(r, "| tr -d") {
		t.Errorf("Open MPI recipe %q lost its escaped pipe", r)
	}
}

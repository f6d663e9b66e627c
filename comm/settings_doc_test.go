package comm_test

import (
	"go/parser"
	"go/token"
	"regexp"
	"slices"
	"testing"

	envset "github.com/gocoll/gocoll/internal/settings"
)

// TestEnvironmentDocumented: every GOCOLL_* variable the library reads
// (internal/settings, where they are all parsed) is in the package doc,
// and the package doc names no variable the library does not read.
func TestEnvironmentDocumented(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil || f.Doc == nil {
		t.Fatalf("doc.go: %v (doc %v)", err, f.Doc)
	}
	doc := f.Doc.Text()
	named := regexp.MustCompile(`GOCOLL_[A-Z0-9_]*[A-Z0-9]`).FindAllString(doc, -1)
	read := envset.Names()
	for _, name := range read {
		if !slices.Contains(named, name) {
			t.Errorf("%s is read (internal/settings) but not in comm's package doc", name)
		}
	}
	for _, name := range named {
		if !slices.Contains(read, name) {
			t.Errorf("comm's package doc names %s, which the library does not read", name)
		}
	}
}

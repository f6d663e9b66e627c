//go:build cgo && linux

package rdma

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestABI compiles abi_fields.h against rdma-core's real
// <infiniband/verbs.h> and checks that every size, offset and constant
// this package declares by hand (ibv_abi.h) matches it. The header comes
// with libibverbs-dev, which CI installs; the package itself never needs
// it.
func TestABI(t *testing.T) {
	const header = "/usr/include/infiniband/verbs.h"
	if _, err := os.Stat(header); err != nil {
		t.Fatalf("%s is needed to check the hand-written verbs ABI: install libibverbs-dev (%v)", header, err)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	pkg, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "probe.c")
	prog := `#include <stddef.h>
#include <stdio.h>
#include <infiniband/verbs.h>
#define ABI_SIZE(t) printf("sizeof " #t "\t%ld\n", (long)sizeof(t));
#define ABI_FIELD(t, f) printf("offsetof " #t " " #f "\t%ld\n", (long)offsetof(t, f));
#define ABI_CONST(ours, theirs) printf("const " #ours "\t%ld\n", (long)(theirs));
int main(void) {
#include "abi_fields.h"
	return 0;
}
`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "probe")
	if out, err := exec.Command(cc, "-I", pkg, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("compiling the ABI probe against %s: %v\n%s", header, err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	real := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), "\t")
		v, err := strconv.ParseInt(val, 10, 64)
		if !ok || err != nil {
			t.Fatalf("probe printed %q", sc.Text())
		}
		real[name] = v
	}
	ours := abiTable()
	if len(real) != len(ours) || len(ours) < 50 {
		t.Fatalf("probe printed %d entries, the package has %d", len(real), len(ours))
	}
	for name, want := range real {
		got, ok := ours[name]
		if !ok {
			t.Errorf("%s: missing from the package's table", name)
		} else if got != want {
			t.Errorf("%s: ibv_abi.h gives %d, <infiniband/verbs.h> %d", name, got, want)
		}
	}
}

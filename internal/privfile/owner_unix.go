//go:build unix

package privfile

import (
	"io/fs"
	"os"
	"syscall"
)

// noFollow refuses to open a symlink at the name.
const noFollow = syscall.O_NOFOLLOW

// mine says whether this process's user owns the file.
func mine(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

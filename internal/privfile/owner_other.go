//go:build !unix

package privfile

import "io/fs"

// noFollow: O_EXCL alone already refuses an existing name, a symlink
// included, where there is no O_NOFOLLOW.
const noFollow = 0

// mine: files carry no owner this package can read here; Lstat's check
// that the name is a regular file, and O_EXCL, still apply.
func mine(fs.FileInfo) bool { return true }

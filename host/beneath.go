package host

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The host acts on a declared path through descriptors, never through the path twice: a
// directory is reached from the root one component at a time with O_NOFOLLOW (a symlink on the
// way is refused, not followed), a missing one is created with mkdirat in the directory just
// opened, and a file's mode and owner are changed through the descriptor it was checked through.
// Something swapping a symlink in between the check and the act finds the act refused.

// errSymlinkOnPath marks a directory path that passes through a symlink or a non-directory.
var errSymlinkOnPath = errors.New("is a symlink or not a directory: refused, not followed")

// openDirBeneath opens dir (a real path at or under root, root prefix included), creating the
// directories missing on the way (0755, each made durable in its parent). Every component below
// root is opened with O_NOFOLLOW: a symlink or a non-directory anywhere on the way is refused,
// naming the path up to it.
func openDirBeneath(root, dir string) (*os.File, error) { return walkBeneath(root, dir, true) }

// openExistingDirBeneath is openDirBeneath for a directory that must exist: nothing is created.
func openExistingDirBeneath(root, dir string) (*os.File, error) { return walkBeneath(root, dir, false) }

func walkBeneath(root, dir string, create bool) (*os.File, error) {
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, fmt.Errorf("directory %s is not under %s", dir, root)
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("root %s: %w", root, err)
	}
	at := root
	if rel != "." {
		for _, c := range strings.Split(rel, "/") {
			next, err := openOrMakeDir(fd, at, c, create)
			unix.Close(fd)
			if err != nil {
				return nil, err
			}
			fd, at = next, filepath.Join(at, c)
		}
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// openOrMakeDir opens the directory name in parent (the directory at path at), creating it when
// missing and create says so; a symlink there is refused.
func openOrMakeDir(parent int, at, name string, create bool) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	p := filepath.Join(at, name)
	fd, err := unix.Openat(parent, name, flags, 0)
	made := false
	if errors.Is(err, unix.ENOENT) && create {
		err = unix.Mkdirat(parent, name, 0o755)
		made = err == nil
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, fmt.Errorf("directory %s cannot be created: %w", p, err)
		}
		if err := unix.Fsync(parent); err != nil {
			return -1, fmt.Errorf("fsync of %s: %w", at, err)
		}
		fd, err = unix.Openat(parent, name, flags, 0)
	}
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return -1, fmt.Errorf("%s %w", p, errSymlinkOnPath)
	case err != nil:
		return -1, fmt.Errorf("directory %s: %w", p, err)
	}
	// 0755 whatever the umask: the unit's is 0077, and a service reading a module's files
	// (nginx as www-data, a container's user) must be able to pass through.
	if made {
		if err := unix.Fchmod(fd, 0o755); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("directory %s: %w", p, err)
		}
	}
	return fd, nil
}

// openFileNoFollow opens the regular file at target for reading without following a symlink
// there, and checks it still is the file examined (same device and inode as was): a file
// swapped in after the check is refused.
func openFileNoFollow(target string, was fs.FileInfo) (*os.File, error) {
	f, err := os.OpenFile(target, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, errors.New("became a symlink after it was examined: refused, not followed")
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !os.SameFile(fi, was) || !fi.Mode().IsRegular() {
		f.Close()
		return nil, errors.New("was replaced by another file after it was examined: left alone")
	}
	return f, nil
}

// tempName is a fresh name for a temporary file beside target.
func tempName(target string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return tempPrefix(target) + hex.EncodeToString(b[:])
}

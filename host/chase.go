package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// On a real machine the host's root is /, so "resolves inside the root" is no check at all: an
// unprivileged user who owns a directory on a declared path could swap a subdirectory for a
// symlink to a root-owned directory (/etc, say), and meshd, as root, would write the declared file
// there, record the target's bytes as the original and create missing directories there. So a
// declared path is resolved one component at a time from the root, and a symlink is followed only
// on a safe transition, as systemd's CHASE_SAFE does: a symlink in a directory owned by someone
// other than root must be owned by that directory's owner, and a symlink owned by someone other
// than root may lead only to what that same user owns. The administrator's own layout, a
// root-owned /srv/data -> /mnt/disk/data, keeps working.

// errUnsafeSymlink marks a symlink the host does not follow (errors.Is).
var errUnsafeSymlink = errors.New("an unsafe symlink: refused, not followed")

// safeEval is filepath.EvalSymlinks of p (a machine path at or under root) with the safe
// transition rule above; a missing component is fs.ErrNotExist, as EvalSymlinks says it.
func safeEval(root, p string) (string, error) {
	return chase(root, p, 0)
}

func chase(root, p string, hops int) (string, error) {
	rel, err := filepath.Rel(root, filepath.Clean(p))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("a symlink on the way leads to %s, outside %s: refused, not followed", p, root)
	}
	cur := root
	todo := strings.Split(rel, "/")
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if cur != root {
				cur = filepath.Dir(cur)
			}
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > maxHops {
			return "", fmt.Errorf("%s passes through more than %d symlinks; refused", declaredOf(root, p), maxHops)
		}
		dest, err := followSafely(root, cur, next, fi, hops)
		if err != nil {
			return "", err
		}
		cur = dest
	}
	return cur, nil
}

// followSafely resolves the symlink at link (lstat'd as fi) in the directory dir, refusing an
// unsafe transition, and returns the real path it leads to.
func followSafely(root, dir, link string, fi fs.FileInfo, hops int) (string, error) {
	linkIDs, _ := statIDs(fi)
	dirFi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	dirIDs, _ := statIDs(dirFi)
	if dirIDs.uid != 0 && dirIDs.uid != linkIDs.uid {
		return "", fmt.Errorf("%s is a symlink owned by uid %d in %s, which uid %d owns: %w",
			declaredOf(root, link), linkIDs.uid, declaredOf(root, dir), dirIDs.uid, errUnsafeSymlink)
	}
	target, err := os.Readlink(link)
	if err != nil {
		return "", fmt.Errorf("%s is a symlink that cannot be read: %w", declaredOf(root, link), err)
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(dir, target)
	}
	real, err := chase(root, target, hops)
	if err != nil {
		return "", err
	}
	if linkIDs.uid != 0 {
		tfi, err := os.Lstat(real)
		if err != nil {
			return "", err
		}
		if t, _ := statIDs(tfi); t.uid != linkIDs.uid {
			return "", fmt.Errorf("%s is a symlink owned by uid %d to %s, which uid %d owns: %w",
				declaredOf(root, link), linkIDs.uid, declaredOf(root, real), t.uid, errUnsafeSymlink)
		}
	}
	return real, nil
}

// safeLink applies the rule to a declared file that is itself a symlink (at link, lstat'd as fi)
// to dest in the same directory: a symlink owned by someone other than root may lead only to a
// file that user owns (a missing one is created by the host as declared).
func safeLink(root, link string, fi fs.FileInfo, dest string) error {
	l, _ := statIDs(fi)
	if l.uid == 0 {
		return nil
	}
	dirFi, err := os.Lstat(filepath.Dir(link))
	if err != nil {
		return err
	}
	if d, _ := statIDs(dirFi); d.uid != 0 && d.uid != l.uid {
		return fmt.Errorf("is a symlink owned by uid %d in a directory uid %d owns: %w", l.uid, d.uid, errUnsafeSymlink)
	}
	tfi, err := os.Lstat(dest)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if t, _ := statIDs(tfi); t.uid != l.uid {
		return fmt.Errorf("is a symlink owned by uid %d to %s, which uid %d owns: %w", l.uid, declaredOf(root, dest), t.uid, errUnsafeSymlink)
	}
	return nil
}

package host

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// located is what is at a declared path: the file the path leads to (through symlinks that stay in
// the declared directory) and, when it exists, its content.
type located struct {
	// target is the real path of the file on this machine (root prefix included).
	target  string
	exists  bool
	content []byte
	info    fs.FileInfo
}

// maxHops bounds how many symlinks a declared path may pass through.
const maxHops = 8

// within says whether p is base or under it.
func within(base, p string) bool {
	if base == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == base || strings.HasPrefix(p, base+"/")
}

// locate finds what is at the declared path p under root (with its symlinks resolved), refusing
// what the host must not touch: a directory, a symlink leading out of the declared directory (never
// followed), anything that is not a regular file, and a file that cannot be read. One walk: each
// component's check needs the one before it, so it stays one body.
func locate(root, p string) (located, error) {
	full := filepath.Join(root, p)
	dir := filepath.Dir(full)
	realDir, err := safeEval(root, dir)
	if errors.Is(err, fs.ErrNotExist) {
		// Its directory is created when the file is written, below the deepest directory that
		// exists: that one must resolve inside root (a symlink above a missing directory is
		// not followed out), and the rest is created one component at a time (openDirBeneath).
		top, rest := dir, ""
		for {
			parent := filepath.Dir(top)
			rest = filepath.Join(filepath.Base(top), rest)
			top = parent
			if _, err := os.Lstat(top); err == nil || top == root || parent == filepath.Dir(parent) {
				break
			}
		}
		realTop, err := safeEval(root, top)
		if err != nil {
			return located{}, fmt.Errorf("its directory %s: %w", filepath.Dir(p), err)
		}
		if !within(root, realTop) {
			return located{}, fmt.Errorf("its directory %s is under %s, which resolves to %s, outside %s: refused, not followed",
				filepath.Dir(p), declaredOf(root, top), realTop, root)
		}
		return located{target: filepath.Join(realTop, rest, filepath.Base(full))}, nil
	}
	if err != nil {
		return located{}, fmt.Errorf("its directory %s: %w", filepath.Dir(p), err)
	}
	if !within(root, realDir) {
		return located{}, fmt.Errorf("its directory %s resolves to %s, outside %s", filepath.Dir(p), realDir, root)
	}
	target := filepath.Join(realDir, filepath.Base(full))
	var fi fs.FileInfo
	for hops := 0; ; hops++ {
		fi, err = os.Lstat(target)
		if errors.Is(err, fs.ErrNotExist) {
			return located{target: target}, nil
		}
		if err != nil {
			return located{}, fmt.Errorf("cannot be examined: %w", err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			break
		}
		if hops == maxHops {
			return located{}, fmt.Errorf("passes through more than %d symlinks; refused", maxHops)
		}
		dest, err := os.Readlink(target)
		if err != nil {
			return located{}, fmt.Errorf("is a symlink that cannot be read: %w", err)
		}
		if !filepath.IsAbs(dest) {
			dest = filepath.Join(filepath.Dir(target), dest)
		}
		dest = filepath.Clean(dest)
		destDir, err := filepath.EvalSymlinks(filepath.Dir(dest))
		if err != nil || !within(realDir, destDir) {
			return located{}, fmt.Errorf("is a symlink to %s, outside %s: refused, not followed", dest, filepath.Dir(p))
		}
		if err := safeLink(root, target, fi, filepath.Join(destDir, filepath.Base(dest))); err != nil {
			return located{}, err
		}
		target = filepath.Join(destDir, filepath.Base(dest))
	}
	switch {
	case fi.IsDir():
		return located{}, errors.New("is a directory, not a file")
	case !fi.Mode().IsRegular():
		return located{}, fmt.Errorf("cannot be read as a file: it is %s", describeType(fi.Mode()))
	}
	f, err := os.OpenFile(target, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return located{}, fmt.Errorf("cannot be read: %w", err)
	}
	defer f.Close()
	fi, err = f.Stat()
	if err != nil {
		return located{}, fmt.Errorf("cannot be read: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return located{}, fmt.Errorf("cannot be read as a file: it is %s", describeType(fi.Mode()))
	}
	content, err := io.ReadAll(f)
	if err != nil {
		return located{}, fmt.Errorf("cannot be read: %w", err)
	}
	return located{target: target, exists: true, content: content, info: fi}, nil
}

func describeType(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file (" + m.Type().String() + ")"
}

// fileMode parses a declared octal mode; empty means 0644.
func fileMode(s string) (fs.FileMode, error) {
	if s == "" {
		return 0o644, nil
	}
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o7777 {
		return 0, fmt.Errorf("mode %q is not an octal file mode such as \"0644\"", s)
	}
	m := fs.FileMode(v & 0o777)
	if v&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if v&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if v&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m, nil
}

// ids is a declared owner in numbers.
type ids struct{ uid, gid int }

// lookupOwner resolves "user[:group]" (names or numbers); empty means root. A user given alone
// gets its primary group.
func lookupOwner(owner string) (ids, error) {
	if owner == "" {
		return ids{0, 0}, nil
	}
	name, group, hasGroup := strings.Cut(owner, ":")
	var out ids
	if n, err := strconv.Atoi(name); err == nil {
		if !validID(n) {
			return ids{}, fmt.Errorf("owner %q: %d is not an id a file can have (-1 would leave the owner as it is)", owner, n)
		}
		out.uid, out.gid = n, n
	} else {
		u, err := user.Lookup(name)
		if err != nil {
			return ids{}, fmt.Errorf("owner %q: %w", owner, err)
		}
		out.uid, _ = strconv.Atoi(u.Uid)
		out.gid, _ = strconv.Atoi(u.Gid)
	}
	if hasGroup {
		if n, err := strconv.Atoi(group); err == nil {
			if !validID(n) {
				return ids{}, fmt.Errorf("owner %q: %d is not an id a file can have (-1 would leave the group as it is)", owner, n)
			}
			out.gid = n
		} else {
			g, err := user.LookupGroup(group)
			if err != nil {
				return ids{}, fmt.Errorf("owner %q: %w", owner, err)
			}
			out.gid, _ = strconv.Atoi(g.Gid)
		}
	}
	return out, nil
}

// validID says whether n is a uid or gid a file can have: 0 to 4294967294 (-1, or 4294967295,
// tells chown to leave the id as it is).
func validID(n int) bool { return n >= 0 && n < 1<<32-1 }

// statIDs returns a file's owner.
func statIDs(fi fs.FileInfo) (ids, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ids{}, false
	}
	return ids{int(st.Uid), int(st.Gid)}, true
}

// tempPrefix names the host's temporary files beside the file they become.
func tempPrefix(target string) string { return "." + filepath.Base(target) + ".meshd-tmp-" }

// declaredOf is the declared path of a machine path under root.
func declaredOf(root, full string) string {
	rel, err := filepath.Rel(root, full)
	if err != nil {
		return full
	}
	return filepath.Join("/", rel)
}

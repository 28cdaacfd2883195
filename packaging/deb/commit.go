package deb

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// BuiltCommit is the package of the repository's commit (any form git accepts: ae14058, HEAD^),
// built once by that commit's own `meshpkg build` and kept under cache/pkg-HASH: what an upgrade
// test installs first. A build is reused while its .deb is there; builds of one cache wait for
// each other. The commit is checked out in a shared clone (its objects borrowed from repo), so
// the repository's own worktrees are not touched.
func BuiltCommit(repo, commit, cache string) (path string, err error) {
	hash, err := gitOut(repo, "rev-parse", "--verify", commit+"^{commit}")
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "pkg-"+hash)
	if p, ok := builtDeb(dir); ok {
		return p, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(cache, ".pkg-lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	if p, ok := builtDeb(dir); ok { // built while this waited
		return p, nil
	}
	src, err := os.MkdirTemp("", "meshpkg-commit-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	if _, err := gitOut("", "clone", "-q", "--shared", "--no-checkout", repo, src); err != nil {
		return "", err
	}
	if _, err := gitOut(src, "checkout", "-q", "--detach", hash); err != nil {
		return "", err
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	cmd := exec.Command("go", "run", "./cmd/meshpkg", "build", "--out", tmp)
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s's package with its own meshpkg: %w\n%s", hash[:7], err, out)
	}
	_ = os.RemoveAll(filepath.Join(tmp, "deb")) // the binary it shipped; the .deb holds it
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	p, ok := builtDeb(dir)
	if !ok {
		return "", fmt.Errorf("%s's meshpkg build wrote no package into %s", hash[:7], dir)
	}
	return p, nil
}

// builtDeb is the one package in dir.
func builtDeb(dir string) (string, bool) {
	m, _ := filepath.Glob(filepath.Join(dir, "meshd_*_amd64.deb"))
	if len(m) != 1 {
		return "", false
	}
	return m[0], true
}

// gitOut runs git in dir ("" for the current one) and returns its output, trimmed.
func gitOut(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

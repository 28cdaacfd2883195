package pass

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"meshd/catalogue"
)

// Confine refuses, for a module kept to its own places (fsm.Resource.Confined), the machine path
// p when where it leads on this machine is outside them: the catalogue's (catalogue.Outside), or
// the module's data directory in this node's data dir (DATA/MODULE, as Refuse allows it). what
// says what p is to the module ("a file at", "a mount of"). root is the machine's root as the
// host sees it ("" is "/"). p is walked from root with every symlink on the way followed, as the
// engine follows a mount's source; the part not there yet is judged as written. A symlink that
// leads nowhere, or out of root, is refused: what it would come to lead to is not known.
func (o Own) Confine(root, what, module, p string) error {
	if root == "" {
		root = "/"
	}
	real, err := realPath(root, filepath.Join(root, p))
	if err != nil {
		return fmt.Errorf("%s %s: %w: module %s may not reach beyond its own places", what, p, err, module)
	}
	return o.ConfineReal(root, what, module, p, real)
}

// ConfineReal is Confine for the declared path p whose real place on the machine, root prefix
// included, is real: where the host's own safe walk of p ends (the host's files).
func (o Own) ConfineReal(root, what, module, p, real string) error {
	if root == "" {
		root = "/"
	}
	if o.Data != "" && module != "" && !slices.Contains(dataNames, module) {
		if mine := filepath.Join(filepath.Clean(o.Data), module); real == mine || strings.HasPrefix(real, mine+"/") {
			return nil
		}
	}
	rel, err := filepath.Rel(root, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("%s %s leads out of the machine's root, to %s: module %s may not reach beyond its own places", what, p, real, module)
	}
	at := "/" + filepath.ToSlash(rel)
	if rel == "." {
		at = "/"
	}
	if why := catalogue.Outside(module, at); why != "" {
		if catalogue.Normalise(at) != catalogue.Normalise(p) {
			why = fmt.Sprintf("%s leads to %s, which %s", p, at, strings.TrimPrefix(why, at+" "))
		}
		return fmt.Errorf("%s %s refused, before anything is written: %s; module %s is not privileged", what, p, why, module)
	}
	return nil
}

// realPath is where full leads: its longest part that exists with its symlinks resolved, and the
// rest as written.
func realPath(root, full string) (string, error) {
	dir, rest := full, ""
	for {
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if fi, lerr := os.Lstat(dir); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("%s is a symlink that leads nowhere", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir || dir == root {
			return full, nil
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
}

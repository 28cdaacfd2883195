package deb

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// mdLink is a markdown link's target.
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// docsPath is a path the docs name as the source lays them out (docs/performance.md), not
	// inside a longer path or a URL.
	docsPath = regexp.MustCompile(`(?:^|[^\w/.:-])(docs/[\w./-]*\w)`)
)

// danglingRefs is each reference a markdown page under docDir of the package extracted at root
// makes that the package does not hold: a relative link (from the page's directory), and a path
// under docs/ (from docDir, the source's root as shipped). Links are followed as the installed
// machine would, inside root.
func danglingRefs(t *testing.T, root, docDir string) []string {
	t.Helper()
	var dangling []string
	base := filepath.Join(root, docDir)
	pages := 0
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		pages++
		text, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		page := strings.TrimPrefix(p, root)
		check := func(ref, target string) {
			if !inside(root, target) {
				dangling = append(dangling, page+": "+ref)
			}
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(text), -1) {
			ref := m[1]
			if strings.HasPrefix(ref, "#") || regexp.MustCompile(`^[a-z]+:`).MatchString(ref) {
				continue
			}
			check(ref, filepath.Join(filepath.Dir(p), strings.SplitN(ref, "#", 2)[0]))
		}
		for _, m := range docsPath.FindAllStringSubmatch(string(text), -1) {
			check(m[1], filepath.Join(base, m[1]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if pages == 0 {
		t.Fatalf("no markdown page under %s", base)
	}
	return dangling
}

// inside says whether path exists under root, a link followed within root (an absolute target
// taken from root).
func inside(root, path string) bool {
	for range 10 {
		st, err := os.Lstat(path)
		if err != nil {
			return false
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			return strings.HasPrefix(path, root+string(filepath.Separator))
		}
		target, err := os.Readlink(path)
		if err != nil {
			return false
		}
		if filepath.IsAbs(target) {
			path = filepath.Join(root, target)
		} else {
			path = filepath.Join(filepath.Dir(path), target)
		}
	}
	return false
}

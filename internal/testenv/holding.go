package testenv

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// FilesHolding names every regular file under dir whose bytes hold s: what a copy of dir gives
// away (a data dir's secrets at rest).
func FilesHolding(t testing.TB, dir, s string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(s)) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

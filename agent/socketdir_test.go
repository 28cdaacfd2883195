package agent

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The socket's directory: one the agent creates is 0700 (0750 and the group's with a socket
// group) whatever the umask; meshd's own /run/meshd is made so even when something else created
// it 0755 first (a lab machine's mkdir, the unit's RuntimeDirectory=); a directory of the
// operator's choosing that exists is left as it is; a file where the directory goes is refused.
func TestSocketDirMode(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	base := t.TempDir()
	own := filepath.Join(base, "run-meshd")
	defer func(prev string) { ownSocketDir = prev }(ownSocketDir)
	ownSocketDir = own
	gid := os.Getegid() // a group the test's user may give, root or not
	listen := func(dir string, gid int) {
		t.Helper()
		ln, err := listenSocket(filepath.Join(dir, "meshd.sock"), gid)
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		os.Remove(filepath.Join(dir, "meshd.sock"))
	}
	mode := func(dir string) (os.FileMode, int) {
		st, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode().Perm(), int(st.Sys().(*syscall.Stat_t).Gid)
	}

	created := filepath.Join(base, "made", "sock")
	listen(created, -1)
	if m, _ := mode(created); m != 0o700 {
		t.Errorf("a socket dir the agent created: %04o, want 0700", m)
	}
	grouped := filepath.Join(base, "grouped")
	listen(grouped, gid)
	if m, g := mode(grouped); m != 0o750 || g != gid {
		t.Errorf("a socket dir created with socket group %d: %04o group %d, want 0750 and the group", gid, m, g)
	}

	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	listen(own, -1)
	if m, _ := mode(own); m != 0o700 {
		t.Errorf("meshd's own socket dir, found 0755: %04o, want 0700", m)
	}
	listen(own, gid)
	if m, g := mode(own); m != 0o750 || g != gid {
		t.Errorf("meshd's own socket dir with socket group %d: %04o group %d, want 0750 and the group", gid, m, g)
	}

	theirs := filepath.Join(base, "theirs")
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	listen(theirs, -1)
	if m, _ := mode(theirs); m != 0o755 {
		t.Errorf("an operator's existing socket dir was changed: %04o, want 0755 as it was", m)
	}

	file := filepath.Join(base, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	if ln, err := listenSocket(filepath.Join(file, "meshd.sock"), -1); err == nil || !strings.Contains(err.Error(), file) {
		if ln != nil {
			ln.Close()
		}
		t.Errorf("a socket dir that is a file: %v, want a refusal naming %s", err, file)
	}
}

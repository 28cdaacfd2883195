package tunnel

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"meshd/internal/testenv"
)

// A found file's hook line runs under the umask wg-quick@.service gave it (0022), not the agent
// unit's 0077: a file it writes is readable by others as when wg-quick ran it.
func TestUnitAHookRunsUnderWgQuicksUmask(t *testing.T) {
	testenv.Require(t, "a hook line", testenv.Missing(false, "bash")...)
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	out := filepath.Join(t.TempDir(), "written-by-postup")
	if err := (wgMachine{}).Hook(context.Background(), "echo up > "+out); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("a hook line's file is %v under the agent's umask 0077, want 0644 as under wg-quick", st.Mode().Perm())
	}
}

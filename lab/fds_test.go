package lab

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A descriptor the lab's command inherited (flock's lock, say) does not reach the processes the
// lab starts, which outlive the command: they would hold the lock until the lab goes down.
func TestInheritedDescriptorsStayOutOfTheLab(t *testing.T) {
	if os.Getenv("MESHLAB_FD_CHILD") == "1" {
		keepFDs()
		// What the shell's own descriptors lead to.
		out, err := exec.Command("sh", "-c", `for f in /proc/$$/fd/*; do readlink "$f"; done`).Output()
		fmt.Printf("fds: %s err: %v\n", strings.Join(strings.Fields(string(out)), " "), err)
		return
	}
	f, err := os.CreateTemp(t.TempDir(), "lock")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestInheritedDescriptorsStayOutOfTheLab$")
	cmd.Env = append(os.Environ(), "MESHLAB_FD_CHILD=1")
	cmd.ExtraFiles = []*os.File{f} // fd 3 in the child, inherited as flock(1) passes its lock
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	line := ""
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "fds: ") {
			line = l
		}
	}
	fds := strings.Fields(strings.TrimSuffix(strings.TrimPrefix(line, "fds: "), " err: <nil>"))
	if line == "" || len(fds) == 0 {
		t.Fatalf("the child said %q", out)
	}
	for _, fd := range fds {
		if fd == f.Name() {
			t.Errorf("a process the lab started holds the inherited %s: %s", f.Name(), line)
		}
	}
}

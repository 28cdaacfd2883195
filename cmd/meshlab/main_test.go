package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var meshlabBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "meshlab-bin-")
	if err != nil {
		panic(err)
	}
	meshlabBin = filepath.Join(dir, "meshlab")
	cmd := exec.Command("go", "build", "-o", meshlabBin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build meshlab: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// meshlab runs the binary and returns its stdout, stderr and exit code.
func meshlab(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(meshlabBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("meshlab %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// An unknown command is named as unknown, with the nearest one.
func TestUnknownCommandIsNamed(t *testing.T) {
	_, errs, code := meshlab(t, "stauts")
	if code != 2 || !strings.Contains(errs, `unknown command "stauts"`) || !strings.Contains(errs, `did you mean "status"`) {
		t.Errorf("meshlab stauts: exit %d\n%s", code, errs)
	}
}

// A mistyped flag shows that command's usage and flags, not every command's.
func TestMistypedFlagShowsOnlyItsCommand(t *testing.T) {
	_, errs, code := meshlab(t, "status", "--nmae", "x")
	if code != 2 || !strings.Contains(errs, "-nmae") || !strings.Contains(errs, "usage: meshlab status") {
		t.Fatalf("meshlab status --nmae: exit %d\n%s", code, errs)
	}
	for _, other := range []string{"-scenario", "-all", "meshlab up", "meshlab down"} {
		if strings.Contains(errs, other) {
			t.Errorf("status's usage shows %q:\n%s", other, errs)
		}
	}
}

// status of a lab that is not there says so in words, and how to raise it.
func TestStatusOfNoLab(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nope")
	_, errs, code := meshlab(t, "status", "--name", "nope", "--dir", dir)
	if code != 1 || !strings.Contains(errs, "no lab nope (nothing at "+dir+")") || !strings.Contains(errs, "meshlab up --name nope") ||
		strings.Contains(errs, "no such file") {
		t.Errorf("meshlab status --name nope: exit %d\n%s", code, errs)
	}
}

// up on a lab that is up already says so once, with the one command that takes it down.
func TestUpOnALabThatIsUp(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "lab.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errs, code := meshlab(t, "up", "--name", "twice", "--dir", dir)
	if code != 1 || strings.Count(errs, "meshlab down") != 1 || !strings.Contains(errs, "lab twice is up already") {
		t.Errorf("meshlab up on a lab that is up: exit %d\n%s", code, errs)
	}
}

// A new user's `meshlab exec hub -- meshd tunnel show` wrapped at 80 columns whatever COLUMNS
// said: a machine's command starts with none of the caller's environment. Its terminal's
// variables are passed (through env in the machine), and nothing else of the caller's.
func TestExecPassesTheTerminal(t *testing.T) {
	got := passTerminal([]string{"meshd", "tunnel", "show"}, []string{"HOME=/home/u", "COLUMNS=81", "DOCKER_HOST=tcp://x", "TERM=xterm-256color"})
	want := []string{"env", "COLUMNS=81", "TERM=xterm-256color", "meshd", "tunnel", "show"}
	if !slices.Equal(got, want) {
		t.Errorf("passTerminal: %q, want %q", got, want)
	}
	if got := passTerminal([]string{"ls"}, []string{"HOME=/home/u"}); !slices.Equal(got, []string{"ls"}) {
		t.Errorf("passTerminal with no terminal variables: %q", got)
	}
}

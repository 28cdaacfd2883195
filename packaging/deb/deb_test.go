package deb

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"meshd/internal/testenv"
)

// The package `make package` builds: lintian finds no error in it, and it holds the binary, the
// unit, the config as a conffile, the completions, the man pages, the docs and the alert rules
// (AlertsPath, docs/alerts.yml as it is), with the tree's version and its Depends. Every
// reference a shipped doc makes (issue 36: the runbook named docs/alerts.yml and
// docs/performance.md, which the package did not hold) resolves inside the package.
func TestPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds meshd and its package (about a minute)")
	}
	testenv.Require(t, "the package test", testenv.Missing(false, "git", "go", "dpkg-deb", "lintian")...)
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(file), "..", "..")
	if _, _, err := GitVersion(repo); err != nil {
		// As another user than the tree's owner, git refuses the repository (safe.directory).
		testenv.Prereq(t, "the tree's version: %v", err)
	}
	path, version, err := BuildIn(repo, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	out, _ := exec.Command("lintian", "--pedantic", "--info", path).CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "E: ") {
			t.Errorf("lintian: %s", line)
		}
	}
	if t.Failed() {
		t.Logf("lintian said:\n%s", out)
	}

	list := testenv.Run(t, "dpkg-deb", "-c", path)
	for _, want := range []string{
		"./usr/bin/meshd", "./lib/systemd/system/meshd.service", "./etc/meshd/meshd.yaml",
		"./usr/share/bash-completion/completions/meshd", "./usr/share/zsh/vendor-completions/_meshd",
		"./usr/share/fish/vendor_completions.d/meshd.fish",
		"./usr/share/man/man1/meshd.1.gz", "./usr/share/man/man1/meshd-genesis.1.gz",
		"./usr/share/doc/meshd/README.md", "." + RunbookPath, "./usr/share/doc/meshd/docs/performance.md",
		"./usr/share/meshd/alerts_test.yml", "./usr/share/meshd/alerts_week_test.yml",
		"./usr/share/doc/meshd/copyright", "./usr/share/doc/meshd/changelog.gz",
		"." + AlertsPath,
	} {
		if !strings.Contains(list, " "+want+"\n") {
			t.Errorf("dpkg-deb -c has no %s:\n%s", want, list)
		}
	}
	if !strings.Contains(list, "-rwxr-xr-x root/root") {
		t.Errorf("the binary is not root's and executable:\n%s", list)
	}
	if got := strings.TrimSpace(testenv.Run(t, "dpkg-deb", "-f", path, "Version")); got != version {
		t.Errorf("Version: %q, want %q", got, version)
	}
	if got := strings.TrimSpace(testenv.Run(t, "dpkg-deb", "-f", path, "Depends")); got != strings.Join(Depends, ", ") {
		t.Errorf("Depends: %q, want %q", got, strings.Join(Depends, ", "))
	}
	ctrl := t.TempDir()
	testenv.Run(t, "dpkg-deb", "-e", path, ctrl)
	if got := testenv.Run(t, "cat", filepath.Join(ctrl, "conffiles")); got != ConfigPath+"\n" {
		t.Errorf("conffiles: %q, want %s", got, ConfigPath)
	}
	alerts := testenv.Run(t, "sh", "-c", "dpkg-deb --fsys-tarfile '"+path+"' | tar -xOf - ."+AlertsPath)
	if want, err := os.ReadFile(filepath.Join(repo, "docs", "alerts.yml")); err != nil || alerts != string(want) {
		t.Errorf("%s is not docs/alerts.yml (%v):\n%s", AlertsPath, err, alerts)
	}
	root := t.TempDir()
	testenv.Run(t, "dpkg-deb", "-x", path, root)
	for _, d := range danglingRefs(t, root, DocDir) {
		t.Errorf("a shipped doc names what the package does not hold: %s", d)
	}
	unit := testenv.Run(t, "sh", "-c", "dpkg-deb --fsys-tarfile '"+path+"' | tar -xOf - ./lib/systemd/system/meshd.service")
	if !strings.Contains(unit, "ExecStart="+BinPath+" agent --config "+ConfigPath+"\n") {
		t.Errorf("the unit does not run %s agent --config %s:\n%s", BinPath, ConfigPath, unit)
	}
}

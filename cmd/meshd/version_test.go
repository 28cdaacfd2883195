package main

import (
	"encoding/json"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// meshd --version and meshd version print the same, with the Go version; --json too.
func TestVersionCommand(t *testing.T) {
	flag, err := exec.Command(meshdBin, "--version").Output()
	if err != nil {
		t.Fatalf("meshd --version: %v", err)
	}
	sub, err := exec.Command(meshdBin, "version").Output()
	if err != nil {
		t.Fatalf("meshd version: %v", err)
	}
	if string(flag) != string(sub) || !strings.Contains(string(flag), runtime.Version()) || !strings.HasPrefix(string(flag), "meshd ") {
		t.Errorf("meshd --version printed %q, meshd version %q; want the same, naming %s", flag, sub, runtime.Version())
	}
	out, err := exec.Command(meshdBin, "--version", "--json").Output()
	if err != nil {
		t.Fatalf("meshd --version --json: %v", err)
	}
	var v VersionView
	if err := json.Unmarshal(out, &v); err != nil || v.GoVersion != runtime.Version() {
		t.Errorf("meshd --version --json = %s (%v); want go_version %s", out, err, runtime.Version())
	}
}

// A build stamped by make (-X main.commit) reports that commit when Go's own stamp is missing.
func TestVersionStampedCommit(t *testing.T) {
	old := commit
	defer func() { commit = old }()
	commit = "0123abcd"
	v := buildVersion()
	if v.Commit == "" {
		t.Fatalf("buildVersion() has no commit with main.commit set")
	}
	var b strings.Builder
	v.text(&b)
	if !strings.Contains(b.String(), v.Commit) {
		t.Errorf("version text %q does not name the commit %s", b.String(), v.Commit)
	}
}

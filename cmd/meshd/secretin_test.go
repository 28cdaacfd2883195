package main

import (
	"bytes"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/pki"
)

// runIn runs the CLI in this process with stdin, returning its error.
func runIn(t *testing.T, stdin string, args ...string) error {
	t.Helper()
	var out bytes.Buffer
	root := newRoot(&globals{out: &out})
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&out)
	root.SilenceUsage, root.SilenceErrors = true, true
	return root.Execute()
}

// The recovery code and the join token can come from a file or standard input, where other users
// of the machine cannot read them (argv they can).
func TestSecretsFromFileOrStdin(t *testing.T) {
	dir := t.TempDir()
	data, keyFile := filepath.Join(dir, "data"), filepath.Join(dir, "seal.key")
	seal := pki.NewSealKey(keyFile)
	if err := seal.Write(); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("t", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := pki.NewNodeKey()
	cert, err := ca.IssueNode("n1", key.Public().(ed25519.PublicKey), pki.ClientCert, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteNodeSecrets(data, seal, &pki.NodeSecrets{NodeKey: key, NodeCertPEM: cert, CACertPEM: ca.CertPEM, Keyring: pki.NewKeyring()}); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(keyFile)
	code := seal.RecoveryCode()
	lose := func() {
		if err := pki.NewSealKey(keyFile).Write(); err != nil { // replaced: the node no longer opens
			t.Fatal(err)
		}
	}
	restore := []string{"operator", "seal-key", "restore", "--seal-key", keyFile, "--data-dir", data}

	lose()
	if err := runIn(t, code+"\n", append(restore, "--recovery-code-file", "-")...); err != nil {
		t.Fatalf("recovery code on standard input: %v", err)
	}
	if now, _ := os.ReadFile(keyFile); !bytes.Equal(now, good) {
		t.Fatal("the seal key restored from standard input is not the original")
	}
	lose()
	codeFile := filepath.Join(dir, "code")
	os.WriteFile(codeFile, []byte(code+"\n"), 0o600)
	if err := runIn(t, "", append(restore, "--recovery-code-file", codeFile)...); err != nil {
		t.Fatalf("recovery code from a file: %v", err)
	}
	if now, _ := os.ReadFile(keyFile); !bytes.Equal(now, good) {
		t.Fatal("the seal key restored from a file is not the original")
	}
	for _, c := range []struct {
		stdin string
		args  []string
		says  string
	}{
		{"", append(restore, "--recovery-code-file", "-"), "recovery code from standard input: it is empty"},
		{"", append(restore, "--recovery-code-file", filepath.Join(dir, "missing")), filepath.Join(dir, "missing")},
		{"", append(restore, "--recovery-code", code, "--recovery-code-file", codeFile), "not both"},
		{"", restore, "--recovery-code-file FILE"},
		{"", []string{"join", "--name", "edge", "--token-file", "-"}, "token from standard input: it is empty"},
		{"", []string{"join", "--name", "edge"}, "--token-file FILE"},
		{"not-a-token\n", []string{"join", "--name", "edge", "--token-file", "-", "--data-dir", filepath.Join(dir, "j")}, "token"},
	} {
		err := runIn(t, c.stdin, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), "unknown flag") {
			t.Errorf("meshd %s: %v; want it to say %q", strings.Join(c.args, " "), err, c.says)
		}
	}
}

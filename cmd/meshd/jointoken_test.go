package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/pki"
)

// Issue 26 finding 1: a token on join's command line is readable by every local user (ps).
// `join --token-file -` reads it from standard input, and says nothing of it; the argument form
// still works but warns on stderr. An expired token shows which token join read: it stops there,
// before anything is sent.
func TestJoinTokenFromStdinAndTheArgumentWarns(t *testing.T) {
	ca, err := pki.NewCA("t", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := pki.SignToken(ca, pki.TokenPayload{ID: pki.NewTokenID(), Mode: "adopted", Exp: time.Now().Add(-time.Minute).Unix(), Bus: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(t.TempDir(), "data")
	join := func(stdin string, args ...string) (string, string, error) {
		var out, errb bytes.Buffer
		root := newRoot(&globals{out: &out})
		root.SetArgs(append([]string{"join", "--name", "edge", "--data-dir", data}, args...))
		root.SetIn(strings.NewReader(stdin))
		root.SetOut(&out)
		root.SetErr(&errb)
		root.SilenceUsage, root.SilenceErrors = true, true
		err := root.Execute()
		return out.String(), errb.String(), err
	}
	_, errs, err := join(tok+"\n", "--token-file", "-")
	if err == nil || !strings.Contains(err.Error(), "expired") || strings.Contains(errs, "warning") {
		t.Fatalf("join --token-file - with the token on stdin: %v; stderr %q", err, errs)
	}
	_, errs, err = join("", tok)
	if err == nil || !strings.Contains(err.Error(), "expired") || !strings.Contains(errs, tokenArgWarning) {
		t.Fatalf("join TOKEN: %v; stderr %q, want the warning", err, errs)
	}
}

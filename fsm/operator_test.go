package fsm

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func cmdBy(t testing.TB, op Op, at time.Time, by string, body any) []byte {
	t.Helper()
	b, err := EncodeBy(op, at, by, body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An operator credential is listed with who made it, checked by name and ID, revoked by name
// with who revoked it, and expires; each refusal says why.
func TestOperatorCredentialLifecycle(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	exp := t0.Add(720 * time.Hour)
	mustApply(t, r, cmdBy(t, OpCredentialCreate, t0.Add(time.Minute), "root on hub's socket", CredentialCreate{Name: "ops-laptop", ID: "0a1b", Expires: exp}))
	c := r.Credentials["ops-laptop"]
	if c == nil || c.CreatedBy != "root on hub's socket" || !c.Created.Equal(t0.Add(time.Minute)) || !c.Expires.Equal(exp) {
		t.Fatalf("credential as listed: %+v", c)
	}
	if err := r.CheckCredential("ops-laptop", "0a1b", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, id string
		at       time.Time
		want     string
	}{
		{"nobody", "0a1b", t0, "not in the record"},
		{"ops-laptop", "ffff", t0, "not the one the record lists"},
		{"ops-laptop", "0a1b", exp, "expired"},
	} {
		if err := r.CheckCredential(tc.name, tc.id, tc.at); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckCredential(%s, %s): %v, want %q", tc.name, tc.id, err, tc.want)
		}
	}
	if _, err := Apply(r, cmdBy(t, OpCredentialCreate, t0.Add(2*time.Minute), "", CredentialCreate{Name: "ops-laptop", ID: "0c", Expires: exp})); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("a second credential of the same name: %v", err)
	}
	for _, bad := range []CredentialCreate{{Name: "Bad Name", ID: "01", Expires: exp}, {Name: "x", ID: "zz", Expires: exp}, {Name: "x", ID: "01", Expires: t0}} {
		if _, err := Apply(r, cmd(t, OpCredentialCreate, t0.Add(time.Minute), bad)); err == nil {
			t.Errorf("%+v was listed", bad)
		}
	}
	mustApply(t, r, cmdBy(t, OpCredentialRevoke, t0.Add(3*time.Minute), "operator ops-desk", CredentialRevoke{Name: "ops-laptop"}))
	err := r.CheckCredential("ops-laptop", "0a1b", t0.Add(4*time.Minute))
	if err == nil || !strings.Contains(err.Error(), "revoked") || !strings.Contains(err.Error(), "operator ops-desk") {
		t.Fatalf("a revoked credential: %v", err)
	}
	if _, err := Apply(r, cmd(t, OpCredentialRevoke, t0.Add(5*time.Minute), CredentialRevoke{Name: "ops-laptop"})); err == nil || !strings.Contains(err.Error(), "already revoked") {
		t.Fatalf("revoked twice: %v", err)
	}
	if _, err := Apply(r, cmd(t, OpCredentialRevoke, t0.Add(5*time.Minute), CredentialRevoke{Name: "nobody"})); err == nil {
		t.Fatal("revoking an unknown credential was taken")
	}
	// The name is free again once revoked; the old certificate stays refused.
	mustApply(t, r, cmd(t, OpCredentialCreate, t0.Add(6*time.Minute), CredentialCreate{Name: "ops-laptop", ID: "0d", Expires: exp}))
	if err := r.CheckCredential("ops-laptop", "0a1b", t0.Add(7*time.Minute)); err == nil {
		t.Fatal("the revoked certificate is taken again under its renewed name")
	}
}

// Every command's By reaches Apply: a token keeps who made it; a command without By (every
// version 3 command in a log written before) applies as it did.
func TestCommandByIsKept(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	mustApply(t, r, cmdBy(t, OpTokenCreate, t0.Add(time.Minute), "operator ops-laptop", TokenCreate{Hash: "h1", Mode: Adopted, Expires: t0.Add(time.Hour)}))
	if got := r.Tokens["h1"].CreatedBy; got != "operator ops-laptop" {
		t.Fatalf("token created by %q", got)
	}
	old, _ := json.Marshal(Command{V: 3, Op: OpTokenCreate, At: t0.Add(2 * time.Minute),
		Body: json.RawMessage(`{"hash":"h2","mode":"adopted","expires":"2026-11-29T13:00:00Z"}`)})
	mustApply(t, r, old)
	if r.Tokens["h2"] == nil || r.Tokens["h2"].CreatedBy != "" {
		t.Fatalf("a version 3 token: %+v", r.Tokens["h2"])
	}
	if b := cmd(t, OpTokenCreate, t0, TokenCreate{}); bytes.Contains(b, []byte(`"by"`)) {
		t.Fatalf("a command given by no one carries by: %s", b)
	}
}

// A snapshot keeps the credentials, revoked ones included, and a restore gives them back.
func TestSnapshotKeepsCredentials(t *testing.T) {
	f := NewFSM()
	cmds := [][]byte{genesisCmd(t, Adopted),
		cmdBy(t, OpCredentialCreate, t0.Add(time.Minute), "root on hub's socket", CredentialCreate{Name: "ops-laptop", ID: "0a", Expires: t0.Add(time.Hour)}),
		cmdBy(t, OpCredentialCreate, t0.Add(time.Minute), "operator ops-laptop", CredentialCreate{Name: "ci", ID: "0b", Expires: t0.Add(time.Hour)}),
		cmdBy(t, OpCredentialRevoke, t0.Add(2*time.Minute), "operator ops-laptop", CredentialRevoke{Name: "ci"})}
	for i, c := range cmds {
		if res := f.Apply(&raft.Log{Index: uint64(i + 1), Data: c}).(Result); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	g.Read(func(r *Record, _ uint64) {
		if c := r.Credentials["ops-laptop"]; c == nil || c.CreatedBy != "root on hub's socket" || c.Revoked() {
			t.Errorf("ops-laptop restored as %+v", c)
		}
		if c := r.Credentials["ci"]; c == nil || !c.Revoked() || c.RevokedBy != "operator ops-laptop" {
			t.Errorf("ci restored as %+v", c)
		}
	})
	bad := bytes.Replace(sink.Bytes(), []byte(`"name":"ci"`), []byte(`"name":"other"`), 1)
	if _, _, err := DecodeSnapshot(bytes.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "not filed under its own name") {
		t.Fatalf("a credential filed under another name: %v", err)
	}
}

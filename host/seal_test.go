package host

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"meshd/fsm"
	"meshd/host/hosttest"
	"meshd/host/pass"
	"meshd/internal/testenv"
	"meshd/pki"
)

// What the host keeps of what it found is sealed at rest (issue 34, the attack: read a copy of
// the data dir): a held file's original, its latest bytes before a take and a driver's record
// (a found container's env) are in no file of the data dir; reopened, the host gives each back,
// and under another seal key the store does not open.
func TestRecordStoreIsSealedAtRest(t *testing.T) {
	hosttest.RequireChown(t)
	const (
		conf    = "/etc/vault/token"
		found   = "foundSecretA1b2c3"
		edited  = "editedSecretD4e5f6"
		env     = "TOKEN=containerEnvSecret7a8b"
		content = "moduleSecretC9d0e1"
	)
	b := hosttest.NewBed(t)
	b.Place(conf, found)
	h, err := Open(Config{DataDir: b.Data, Seal: hosttest.Seal, Root: b.Root, Logger: hosttest.Log()})
	if err != nil {
		t.Fatal(err)
	}
	res := hosttest.File("vault", conf, content, false)
	hosttest.NoErrors(t, b.Pass(h, hosttest.Decl(fsm.Adopted, res)))
	b.Place(conf, edited)
	hosttest.NoErrors(t, b.Pass(h, hosttest.Decl(fsm.Adopted, res)))
	res.Taken = true
	hosttest.NoErrors(t, b.Pass(h, hosttest.Decl(fsm.Adopted, res)))
	if err := h.records(fsm.KindContainer).Put("web", []byte(`{"env":["`+env+`"]}`)); err != nil {
		t.Fatal(err)
	}
	h.Close()

	for _, secret := range []string{found, edited, env, content} {
		if held := testenv.FilesHolding(t, b.Data, secret); len(held) > 0 {
			t.Errorf("%q is in clear in %v", secret, held)
		}
	}
	h = openBed(b)
	hosttest.WantOriginal(t, h, conf, found)
	if got, err := h.Latest(conf); err != nil || string(got) != edited {
		t.Fatalf("latest bytes reopened: %q, %v", got, err)
	}
	if got, ok, err := h.records(fsm.KindContainer).Get("web"); err != nil || !ok || !strings.Contains(string(got), env) {
		t.Fatalf("container record reopened: %q %v %v", got, ok, err)
	}
	h.Close()
	if _, err := Open(Config{DataDir: b.Data, Seal: pki.NewSealKey("/etc/other.key"), Root: b.Root}); err == nil ||
		!strings.Contains(err.Error(), "another seal key than /etc/other.key") {
		t.Fatalf("the record store opened under another seal key: %v", err)
	}
}

// A record store written before the seal (store.go's buckets, every value in clear, as meshd
// kept them) opens: the host gives back the original and the container record it held, and from
// then on no file of the data dir holds them, not even in the pages bolt freed.
func TestRecordStoreFromBeforeTheSealIsSealedOnOpen(t *testing.T) {
	const (
		conf  = "/etc/vault/token"
		found = "plainOriginalSecret0f9e"
		env   = "TOKEN=plainEnvSecret3c4d"
		gone  = "plainDroppedSecret5a6b"
	)
	b := hosttest.NewBed(t)
	db, err := bolt.Open(storePath(b.Data), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	fr, _ := json.Marshal(foundRecord{Module: "vault", Hash: pass.HashOf([]byte(found)), Size: len(found), At: time.Now()})
	put := func(path [][]byte, k, v string) {
		t.Helper()
		if err := db.Update(func(tx *bolt.Tx) error {
			bk, err := tx.CreateBucketIfNotExists(path[0])
			for _, p := range path[1:] {
				if err == nil {
					bk, err = bk.CreateBucketIfNotExists(p)
				}
			}
			if err != nil {
				return err
			}
			if v == "" {
				return bk.Delete([]byte(k))
			}
			return bk.Put([]byte(k), []byte(v))
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, bk := range [][]byte{bucketWritten, bucketLatest} {
		put([][]byte{bk}, "/none", "")
	}
	put([][]byte{bucketOriginals}, conf, found)
	put([][]byte{bucketFound}, conf, string(fr))
	put([][]byte{bucketDrivers, []byte(fsm.KindContainer)}, "web", `{"env":["`+env+`"]}`)
	put([][]byte{bucketOriginals}, "/etc/vault/old", gone) // dropped: its bytes stay in a freed page
	put([][]byte{bucketOriginals}, "/etc/vault/old", "")
	db.Close()
	if len(testenv.FilesHolding(t, b.Data, gone)) == 0 || len(testenv.FilesHolding(t, b.Data, found)) == 0 {
		t.Fatal("the store written in clear does not hold its secrets")
	}

	h := openBed(b)
	hosttest.WantOriginal(t, h, conf, found)
	if got, ok, err := h.records(fsm.KindContainer).Get("web"); err != nil || !ok || !strings.Contains(string(got), env) {
		t.Fatalf("container record kept before the seal: %q %v %v", got, ok, err)
	}
	for _, secret := range []string{found, env, gone} {
		if held := testenv.FilesHolding(t, b.Data, secret); len(held) > 0 {
			t.Errorf("after the upgrade %q is still in clear in %v", secret, held)
		}
	}
}

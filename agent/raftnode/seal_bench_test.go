package raftnode

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// BenchmarkLogStore is what the seal adds to a commit's write: one entry of a command's size
// (1 KiB) stored and read back, fsync'd as Raft stores it, on raft-boltdb in clear and sealed;
// and the sealing and opening of it alone (seal-only), the CPU the seal adds to each entry.
func BenchmarkLogStore(b *testing.B) {
	data := []byte(`{"op":"token.create","body":"` + strings.Repeat("x", 1000) + `"}`)
	b.Run("seal-only", func(b *testing.B) {
		s := &sealedLog{seal: testSeal}
		for i := range b.N {
			if _, err := s.openField("data", uint64(i), s.sealField("data", uint64(i), data)); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, sealed := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "sealed"}[sealed]
		b.Run(name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "raft.db")
			var store interface {
				raft.LogStore
				Close() error
			}
			if sealed {
				s, err := openLog(path, testSeal, time.Second)
				if err != nil {
					b.Fatal(err)
				}
				store = s
			} else {
				s, err := raftboltdb.NewBoltStore(path)
				if err != nil {
					b.Fatal(err)
				}
				store = s
			}
			defer store.Close()
			b.ResetTimer()
			for i := range b.N {
				l := &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data}
				if err := store.StoreLogs([]*raft.Log{l}); err != nil {
					b.Fatal(err)
				}
				var got raft.Log
				if err := store.GetLog(l.Index, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

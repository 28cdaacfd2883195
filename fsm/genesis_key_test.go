package fsm

import (
	"testing"

	"meshd/catalogue"
)

// The control-node's identity key is recorded at genesis, as an enrolled node's is, so servers
// can verify the control-node's signed gossip reports from the record.
func TestGenesisRecordsControlNodeKey(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, cmd(t, OpGenesis, t0, Genesis{Node: "hub", ID: "id-hub", Mode: Adopted, Advertise: "198.51.100.1",
		PublicKey: "aHViLWtleQ==", Catalogue: catalogue.DefaultSources(), Assign: []string{"mesh"}}))
	if got := r.Nodes["hub"].PublicKey; got != "aHViLWtleQ==" {
		t.Fatalf("hub's public key in the record = %q, want the genesis command's", got)
	}
	// It survives a snapshot round trip like every other field.
	r2, err := UnmarshalRecord(marshal(t, r))
	if err != nil {
		t.Fatal(err)
	}
	if got := r2.Nodes["hub"].PublicKey; got != "aHViLWtleQ==" {
		t.Fatalf("after snapshot round trip the hub's key = %q", got)
	}
}

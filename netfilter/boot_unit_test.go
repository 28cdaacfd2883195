package netfilter

import (
	"encoding/json"
	"net/netip"
	"os"
	"reflect"
	"testing"
)

// A server's guard admits the other servers to its Raft port: that map is kept for boot and read
// back exactly, or the boot unit would load a guard that refuses the other servers (or, as
// before Port had a text form, nothing would be kept at all on a server).
func TestKeptGuardWithAdmittedServersReadsBack(t *testing.T) {
	env := Env{StateDir: t.TempDir()}
	raft := Port{"tcp", 7000}
	spec := GuardSpec{
		Ports:   []Port{raft, {"tcp", 7001}},
		Trusted: []string{"meshd0"},
		Admit:   map[Port][]netip.Addr{raft: {netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("2001:db8::2")}},
	}
	if wrote, err := KeepForBoot(env, BootTables{Guard: &spec}); err != nil || !wrote {
		t.Fatalf("keep a server's guard: wrote=%v err=%v", wrote, err)
	}
	b, err := os.ReadFile(BootPath(env.StateDir))
	if err != nil {
		t.Fatal(err)
	}
	var back BootTables
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("the kept guard does not read back: %v\n%s", err, b)
	}
	if back.Guard == nil || !reflect.DeepEqual(*back.Guard, spec) {
		t.Fatalf("the kept guard reads back as %+v, want %+v\n%s", back.Guard, spec, b)
	}
}

func TestPortTextRefusesWhatIsNotAPort(t *testing.T) {
	for _, s := range []string{"tcp", "tcp/0", "tcp/70000", "sctp/80", "/80", "tcp/x"} {
		var p Port
		if err := p.UnmarshalText([]byte(s)); err == nil {
			t.Errorf("%q read as %v, want an error naming it", s, p)
		}
	}
	var p Port
	if err := p.UnmarshalText([]byte("udp/51820")); err != nil || p != (Port{"udp", 51820}) {
		t.Errorf("udp/51820 read as %v, %v", p, err)
	}
}

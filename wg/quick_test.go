package wg

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

func mustKey(t testing.TB) wgtypes.Key {
	t.Helper()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestParseQuickReadsWhatAPredecessorWrites(t *testing.T) {
	priv, p1, p2, psk := mustKey(t), mustKey(t).PublicKey(), mustKey(t).PublicKey(), mustKey(t)
	conf := `# written by the predecessor
[Interface]
Address = 10.77.0.1/24, fd77::1/64
ListenPort=51820
privatekey = ` + priv.String() + `
DNS = 10.77.0.53
PostUp = echo up   # a comment after a value
PreUp = sysctl -w net.ipv4.ip_forward=1
postup = iptables -A FORWARD -i %i -j ACCEPT; iptables -t nat -A POSTROUTING -o eth0 -j MASQUERADE
PostDown = iptables -D FORWARD -i %i -j ACCEPT

[Peer]
# web1
PublicKey = ` + p1.String() + `
AllowedIPs = 10.77.0.2/32
AllowedIPs = 10.99.0.0/16
PresharedKey = ` + psk.String() + `

[peer]
PublicKey = ` + p2.String() + `
AllowedIPs = 10.77.0.3/32, fd77::3/128
Endpoint = 198.51.100.3:51820
PersistentKeepalive = 25
`
	q, err := ParseQuick(strings.NewReader(conf))
	if err != nil {
		t.Fatal(err)
	}
	wantAddrs := []netip.Prefix{netip.MustParsePrefix("10.77.0.1/24"), netip.MustParsePrefix("fd77::1/64")}
	if !equalPrefixList(q.Addresses, wantAddrs) {
		t.Errorf("addresses = %v, want %v (host bits kept)", q.Addresses, wantAddrs)
	}
	if q.ListenPort != 51820 {
		t.Errorf("listen port = %d", q.ListenPort)
	}
	if q.PrivateKey == nil || *q.PrivateKey != priv {
		t.Errorf("private key not read")
	}
	if len(q.Peers) != 2 {
		t.Fatalf("peers = %d, want 2", len(q.Peers))
	}
	a, b := q.Peers[0], q.Peers[1]
	if a.PublicKey != p1 || b.PublicKey != p2 {
		t.Errorf("peer keys wrong")
	}
	if !equalPrefixList(a.AllowedIPs, []netip.Prefix{netip.MustParsePrefix("10.77.0.2/32"), netip.MustParsePrefix("10.99.0.0/16")}) {
		t.Errorf("peer 1 allowed IPs = %v (repeated lines add up)", a.AllowedIPs)
	}
	if a.PresharedKey == nil || *a.PresharedKey != psk {
		t.Errorf("peer 1 preshared key not read")
	}
	if a.Endpoint != "" || a.Keepalive != 0 {
		t.Errorf("peer 1 has endpoint %q keepalive %v, want none", a.Endpoint, a.Keepalive)
	}
	if b.EndpointAddr != netip.MustParseAddrPort("198.51.100.3:51820") || b.Keepalive != 25*time.Second {
		t.Errorf("peer 2 endpoint %v keepalive %v", b.EndpointAddr, b.Keepalive)
	}
	// Hooks in file order, a line each, the comment cut as wg-quick cuts it.
	up := For(q.Hooks.PostUp, "wg0")
	if want := []string{"echo up", "iptables -A FORWARD -i wg0 -j ACCEPT; iptables -t nat -A POSTROUTING -o eth0 -j MASQUERADE"}; !slices.Equal(up, want) {
		t.Errorf("PostUp for wg0 = %q, want %q", up, want)
	}
	if len(q.Hooks.PreUp) != 1 || len(q.Hooks.PostDown) != 1 || len(q.Hooks.PreDown) != 0 {
		t.Errorf("hooks %+v", q.Hooks)
	}
}

func TestParseQuickKeepsAHostnameEndpointAsWritten(t *testing.T) {
	q, err := ParseQuick(strings.NewReader("[Peer]\nPublicKey = " + mustKey(t).PublicKey().String() + "\nEndpoint = hub.example.net:51820\nPersistentKeepalive = off\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := q.Peers[0]; p.Endpoint != "hub.example.net:51820" || p.EndpointAddr.IsValid() || p.Keepalive != 0 {
		t.Errorf("peer = %+v", p)
	}
}

func TestParseQuickRefusesWhatItCannotRead(t *testing.T) {
	for name, conf := range map[string]string{
		"bad key":          "[Interface]\nPrivateKey = notakey\n",
		"bad port":         "[Interface]\nListenPort = 70000\n",
		"bad address":      "[Interface]\nAddress = 10.77.0.300/24\n",
		"no section":       "ListenPort = 1\n",
		"unknown section":  "[Wat]\n",
		"no equals":        "[Interface]\nListenPort\n",
		"peer without key": "[Peer]\nAllowedIPs = 10.0.0.0/8\n",
	} {
		if _, err := ParseQuick(strings.NewReader(conf)); err == nil {
			t.Errorf("%s: parsed without error", name)
		}
	}
}

func TestReadQuickFileNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	_, err := ReadQuickFile(QuickPath(dir, "wg0"))
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(dir, "wg0.conf")) {
		t.Errorf("missing file: err = %v", err)
	}
	if err := os.WriteFile(QuickPath(dir, "wg1"), []byte("[Interface]\nListenPort = x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = ReadQuickFile(QuickPath(dir, "wg1"))
	if err == nil || !strings.Contains(err.Error(), "wg1.conf") || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad file: err = %v", err)
	}
}

func equalPrefixList(a, b []netip.Prefix) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A file's DNS= goes to resolvconf as wg-quick hands it: the addresses as name servers, the rest
// as search domains, for the interface (under interface-order's prefix when the machine has one).
func TestDNSLineHandsResolvconfWhatWgQuickDoes(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	q, err := ParseQuick(strings.NewReader("[Interface]\nDNS = 10.44.0.1, fd44::1, lan\nDNS = corp.example\n"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	got := filepath.Join(dir, "got")
	fake := "#!/bin/sh\necho \"$@\" > " + got + ".args\ncat > " + got + "\n"
	if err := os.WriteFile(filepath.Join(dir, "resolvconf"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	line := DNSLine(q.DNS, "wg0")
	cmd := exec.Command("bash", "-c", line)
	cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", line, err, out)
	}
	text, _ := os.ReadFile(got)
	args, _ := os.ReadFile(got + ".args")
	if want := "nameserver 10.44.0.1\nnameserver fd44::1\nsearch lan corp.example\n"; string(text) != want {
		t.Errorf("resolvconf read %q, want %q", text, want)
	}
	prefix := ""
	if b, err := os.ReadFile("/etc/resolvconf/interface-order"); err == nil && strings.Contains(string(b), "tun*") {
		prefix = "tun."
	}
	if want := "-a " + prefix + "wg0 -m 0 -x\n"; string(args) != want {
		t.Errorf("resolvconf ran with %q, want %q", args, want)
	}
	if DNSLine([]string{"lan"}, "wg0") != "" {
		t.Error("search domains alone make a line; wg-quick sets nothing without a name server")
	}
}

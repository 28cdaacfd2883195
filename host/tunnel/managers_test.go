package tunnel

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"meshd/container"
	"meshd/host"
	"meshd/host/hosttest"
)

func writeAt(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, body := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const wgNetdev = "[NetDev]\nName=wg0\nKind=wireguard\n\n[WireGuard]\nListenPort=51820\nPrivateKeyFile=/etc/systemd/network/wg0.key\n"

// A .netdev defining wg0 as WireGuard is found in each of networkd's directories; one of the same
// name in /etc masks the shipped one, a masked or empty one is not loaded, and a drop-in can make
// an unrelated netdev wg0's.
func TestUnitNetworkdNetdevManagesTheInterface(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		links map[string]string
		want  []string
	}{
		{name: "in /etc", files: map[string]string{"etc/systemd/network/50-wg0.netdev": wgNetdev}, want: []string{"/etc/systemd/network/50-wg0.netdev"}},
		{name: "in /run", files: map[string]string{"run/systemd/network/wg0.netdev": wgNetdev}, want: []string{"/run/systemd/network/wg0.netdev"}},
		{name: "shipped in /usr/lib", files: map[string]string{"usr/lib/systemd/network/wg0.netdev": wgNetdev}, want: []string{"/usr/lib/systemd/network/wg0.netdev"}},
		{name: "in /lib", files: map[string]string{"lib/systemd/network/wg0.netdev": wgNetdev}, want: []string{"/lib/systemd/network/wg0.netdev"}},
		{name: "/etc's file of the same name masks /usr/lib's",
			files: map[string]string{"usr/lib/systemd/network/wg0.netdev": wgNetdev, "etc/systemd/network/wg0.netdev": "[NetDev]\nName=wg0\nKind=dummy\n"}},
		{name: "masked by an empty file in /etc",
			files: map[string]string{"usr/lib/systemd/network/wg0.netdev": wgNetdev, "etc/systemd/network/wg0.netdev": ""}},
		{name: "masked by a link to /dev/null", files: map[string]string{"usr/lib/systemd/network/wg0.netdev": wgNetdev},
			links: map[string]string{"etc/systemd/network/wg0.netdev": "/dev/null"}},
		{name: "another interface", files: map[string]string{"etc/systemd/network/wg1.netdev": strings.Replace(wgNetdev, "wg0", "wg1", 1)}},
		{name: "not WireGuard", files: map[string]string{"etc/systemd/network/wg0.netdev": "[NetDev]\nName=wg0\nKind=bridge\n"}},
		{name: "a .network only", files: map[string]string{"etc/systemd/network/wg0.network": "[Match]\nName=wg0\n"}},
		{name: "named by a drop-in", want: []string{"/etc/systemd/network/tun.netdev"}, files: map[string]string{
			"etc/systemd/network/tun.netdev":              "[NetDev]\nName=tun9\nKind=wireguard\n",
			"etc/systemd/network/tun.netdev.d/10-wg.conf": "# renamed\n[NetDev]\nName = wg0\n"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			writeAt(t, root, c.files)
			for p, target := range c.links {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
					t.Fatal(err)
				}
			}
			ms, err := Managers(context.Background(), Probe{Root: root, Interface: "wg0", InNamespace: true})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range ms {
				if m.Kind != ManagerNetworkd {
					t.Errorf("kind %q, want %q", m.Kind, ManagerNetworkd)
				}
				got = append(got, m.Path)
				r := m.Refusal()
				for _, w := range []string{"wg0 is managed by systemd-networkd", m.Path, "networkctl reload", "then take it over"} {
					if !strings.Contains(r, w) {
						t.Errorf("refusal %q does not say %q", r, w)
					}
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("managers %v, want %v", got, c.want)
			}
		})
	}
}

// A NetworkManager keyfile of type wireguard for wg0, in /etc or /run, is found with its
// connection's name; other types, other interfaces and backups are not.
func TestUnitNetworkManagerConnectionManagesTheInterface(t *testing.T) {
	keyfile := "[connection]\nid=Office VPN\nuuid=0b0c9d6e-9a55-4b64-9d3c-8e7b1c7b2a11\ntype=wireguard\ninterface-name=wg0\n\n[wireguard]\nlisten-port=51820\n"
	root := t.TempDir()
	writeAt(t, root, map[string]string{
		"etc/NetworkManager/system-connections/Office VPN.nmconnection":  keyfile,
		"run/NetworkManager/system-connections/wg0-run.nmconnection":     strings.Replace(keyfile, "Office VPN", "wg0-run", 1),
		"etc/NetworkManager/system-connections/Office VPN.nmconnection~": keyfile,
		"etc/NetworkManager/system-connections/wifi.nmconnection":        "[connection]\nid=wifi\ntype=wifi\ninterface-name=wlan0\n",
		"etc/NetworkManager/system-connections/wg1.nmconnection":         strings.Replace(keyfile, "interface-name=wg0", "interface-name=wg1", 1),
	})
	ms, err := Managers(context.Background(), Probe{Root: root, Interface: "wg0", InNamespace: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("managers %+v, want the two wg0 connections", ms)
	}
	want := map[string]string{
		"/etc/NetworkManager/system-connections/Office VPN.nmconnection": "Office VPN",
		"/run/NetworkManager/system-connections/wg0-run.nmconnection":    "wg0-run",
	}
	for _, m := range ms {
		if m.Kind != ManagerNetworkManager || want[m.Path] != m.Connection {
			t.Errorf("manager %+v, want one of %v", m, want)
		}
	}
	r := ms[0].Refusal()
	for _, w := range []string{"wg0 is managed by NetworkManager", `connection "Office VPN"`, "Office VPN.nmconnection", "nmcli connection delete 'Office VPN'", "wg-quick up wg0"} {
		if !strings.Contains(r, w) {
			t.Errorf("refusal %q does not say %q", r, w)
		}
	}
}

// A container is the tunnel's when it publishes the tunnel's UDP port, or runs a WireGuard image
// with NET_ADMIN on the machine's network, or anywhere when the interface is not in the
// machine's namespace; a WireGuard container beside a found tunnel in the machine's namespace
// is not.
func TestUnitContainerManagesTheTunnel(t *testing.T) {
	pub := func(port uint16) []container.Published {
		return []container.Published{{HostIP: "0.0.0.0", HostPort: port, ContainerPort: 51820, Proto: "udp"}, {HostIP: "0.0.0.0", HostPort: 51821, ContainerPort: 51821, Proto: "tcp"}}
	}
	cs := []container.Running{
		{Name: "wg-easy", Image: "ghcr.io/wg-easy/wg-easy:14", NetworkMode: "bridge", NetAdmin: true, Published: pub(51820)},
		{Name: "relay", Image: "example/udp-relay", NetworkMode: "bridge", Published: pub(51820)},
		{Name: "wireguard", Image: "lscr.io/linuxserver/wireguard", NetworkMode: "host", NetAdmin: true},
		{Name: "other-wg", Image: "lscr.io/linuxserver/wireguard", NetworkMode: "bridge", NetAdmin: true, Published: pub(51999)},
		{Name: "web", Image: "nginx", NetworkMode: "bridge", Published: []container.Published{{HostIP: "0.0.0.0", HostPort: 8080, ContainerPort: 80, Proto: "tcp"}}},
		{Name: "nowg", Image: "wireguard-tools-docs", NetworkMode: "host"},
	}
	list := func(context.Context) ([]container.Running, error) { return cs, nil }
	names := func(in bool, port int) []string {
		ms, err := Managers(context.Background(), Probe{Root: t.TempDir(), Interface: "wg0", Port: port, InNamespace: in, Containers: list})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range ms {
			out = append(out, m.Container)
		}
		return out
	}
	if got, want := names(true, 0), []string{"wg-easy", "relay", "wireguard"}; !slices.Equal(got, want) {
		t.Errorf("wg0 in the machine's namespace, port 51820: %v, want %v", got, want)
	}
	if got, want := names(false, 0), []string{"wg-easy", "relay", "wireguard", "other-wg"}; !slices.Equal(got, want) {
		t.Errorf("wg0 not in the machine's namespace: %v, want %v", got, want)
	}
	if got, want := names(true, 51999), []string{"wireguard", "other-wg"}; !slices.Equal(got, want) {
		t.Errorf("port 51999: %v, want %v", got, want)
	}
	ms, _ := Managers(context.Background(), Probe{Interface: "wg0", Root: t.TempDir(), Containers: list})
	r := ms[0].Refusal()
	for _, w := range []string{"container wg-easy", "image ghcr.io/wg-easy/wg-easy:14", "publishing 0.0.0.0:51820/udp", "container's network namespace", "docker update --restart=no wg-easy", "then take it over"} {
		if !strings.Contains(r, w) {
			t.Errorf("refusal %q does not say %q", r, w)
		}
	}

	// an engine that does not answer is said, and the files are still read
	root := t.TempDir()
	writeAt(t, root, map[string]string{"etc/systemd/network/wg0.netdev": wgNetdev})
	ms, err := Managers(context.Background(), Probe{Root: root, Interface: "wg0", Containers: func(context.Context) ([]container.Running, error) {
		return nil, errors.New("engine unreachable")
	}})
	if len(ms) != 1 || err == nil || !strings.Contains(err.Error(), "engine unreachable") {
		t.Errorf("managers %+v, err %v: want the .netdev and the engine's error", ms, err)
	}
}

// The driver refuses to take over a found interface networkd or a container manages, before
// anything stops: the found wg0 still carries the peers, and the reason names the manager.
func TestUnitAManagedInterfaceRefusesTheTakeover(t *testing.T) {
	for _, c := range []struct {
		name       string
		files      map[string]string
		containers []container.Running
		says       []string
	}{
		{name: "networkd", files: map[string]string{"etc/systemd/network/50-wg0.netdev": wgNetdev},
			says: []string{"not taking wg0 over", "systemd-networkd", "/etc/systemd/network/50-wg0.netdev"}},
		{name: "NetworkManager", files: map[string]string{"etc/NetworkManager/system-connections/wg0.nmconnection": "[connection]\nid=wg0\ntype=wireguard\ninterface-name=wg0\n"},
			says: []string{"not taking wg0 over", "NetworkManager", "wg0.nmconnection"}},
		{name: "container on the machine's network", containers: []container.Running{{Name: "wireguard", Image: "linuxserver/wireguard", NetworkMode: "host", NetAdmin: true}},
			says: []string{"not taking wg0 over", "container wireguard", "image linuxserver/wireguard"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newTestBed(t)
			writeAt(t, b.root, c.files)
			drv := newDriver(Config{Root: b.root, Logger: hosttest.Log()}, b.wg, SealedKey{Path: KeyPath(b.data), Seal: b.seal})
			drv.containers = func(context.Context) ([]container.Running, error) { return c.containers, nil }
			h, err := host.Open(host.Config{DataDir: b.data, Seal: hosttest.Seal, Root: b.root, Logger: hosttest.Log(), Drivers: []host.Driver{drv}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { h.Close() })
			rep := h.Reconcile(hosttest.Ctx(t), b.decl)
			if len(rep.Errors) == 0 {
				t.Fatalf("no refusal; ops %v", b.wg.ops)
			}
			for _, w := range c.says {
				if !strings.Contains(rep.Errors[0].Reason, w) {
					t.Errorf("reason %q does not say %q", rep.Errors[0].Reason, w)
				}
			}
			if len(b.wg.ops) != 0 || !b.wg.links["wg0"].up {
				t.Errorf("ops %v: something was done to the found wg0", b.wg.ops)
			}
			if _, err := os.Lstat(filepath.Join(b.root, "etc/systemd/system/wg-quick@wg0.service")); !os.IsNotExist(err) {
				t.Errorf("the found unit was masked for a refused takeover: %v", err)
			}
			if _, ok, _ := drv.keys.Load(); ok {
				t.Error("the found key was sealed for a refused takeover")
			}
		})
	}
}

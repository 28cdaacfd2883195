package tunnel

// What else manages a found WireGuard interface: systemd-networkd, NetworkManager, or a WireGuard
// running in a container. A takeover deletes the found link and raises the mesh's under its name;
// any of these would raise the found one again (a networkd restart or reload, NetworkManager's
// autoconnect, the container's restart) and fight the mesh's for the port and the name, or the
// interface is not the machine's to take at all (it lives in a container's network namespace).
// So every preflight before a takeover (genesis --take-tunnel, join --tunnel, tunnel take, and
// the driver before it stops anything) refuses a managed interface by name, as it refuses a
// firewall meshd does not speak. The wg-quick@ unit is not among them: it is masked (disableUnits).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"meshd/container"
	"meshd/wg"
)

// The managers Managers finds.
const (
	ManagerNetworkd       = "systemd-networkd"
	ManagerNetworkManager = "NetworkManager"
	ManagerContainer      = "container"
)

// DefaultWireGuardPort is the port a WireGuard tunnel listens on when nothing says otherwise
// (wg-quick's examples, wg-easy's and PiVPN's defaults): the port a container publishing a tunnel
// is looked for on when neither the operator nor a found interface gives one.
const DefaultWireGuardPort = 51820

// Manager is one thing besides wg-quick that manages the found interface.
type Manager struct {
	Kind      string // ManagerNetworkd, ManagerNetworkManager or ManagerContainer
	Interface string
	// Path is the file that defines the interface (networkd's .netdev, NetworkManager's keyfile).
	Path string
	// Connection is NetworkManager's name for it (the keyfile's id).
	Connection string
	// Container and Image name the container; Published is the tunnel port it publishes, if any
	// ("0.0.0.0:51820/udp"); HostNetwork says it runs in the machine's network namespace.
	Container   string
	Image       string
	Published   string
	HostNetwork bool
}

// Source names where the manager was found: the file, or the container with its image and port.
func (m Manager) Source() string {
	if m.Kind != ManagerContainer {
		return m.Path
	}
	s := "container " + m.Container + ", image " + m.Image
	if m.Published != "" {
		s += ", publishing " + m.Published
	}
	if m.HostNetwork {
		s += ", on the machine's network with NET_ADMIN"
	}
	return s
}

// Refusal says the interface is managed, by what, and what the operator does before taking it
// over. meshd carries what the live interface has (key, port, addresses, peers with their
// preshared keys), so the remedy only has to stop the manager raising it again.
func (m Manager) Refusal() string {
	i := m.Interface
	switch m.Kind {
	case ManagerNetworkd:
		return fmt.Sprintf("%s is managed by systemd-networkd (%s), which would raise it again at its next start or `networkctl reload` and fight the mesh's %s for its port: "+
			"move the .netdev aside (or move its peers to a wg-quick file, /etc/wireguard/%s.conf) and run `networkctl reload` (the live %s stays up), then take it over", i, m.Path, i, i, i)
	case ManagerNetworkManager:
		return fmt.Sprintf("%s is managed by NetworkManager (connection %q, %s), which would raise it again when it starts or the connection autoconnects: "+
			"move its peers to a wg-quick file (/etc/wireguard/%s.conf), `nmcli connection delete %s` and `wg-quick up %s`, then take it over", i, m.Connection, m.Path, i, shellWord(m.Connection), i)
	}
	if m.HostNetwork {
		return fmt.Sprintf("%s is managed by a WireGuard in a container (%s), which would raise it again when the container restarts: "+
			"move its peers to a wg-quick file (/etc/wireguard/%s.conf), stop the container for good (`docker update --restart=no %s && docker stop %s`) and `wg-quick up %s`, then take it over", i, m.Source(), i, m.Container, m.Container, i)
	}
	return fmt.Sprintf("the tunnel %s is a WireGuard in a container (%s): its interface is in the container's network namespace, not the machine's, so meshd cannot take it over in place: "+
		"move its peers to a wg-quick file (/etc/wireguard/%s.conf; wg-easy keeps them in its wg0.conf), stop the container for good (`docker update --restart=no %s && docker stop %s`) and `wg-quick up %s` on the machine, then take it over", i, m.Source(), i, m.Container, m.Container, i)
}

// ManagedError refuses a takeover of an interface something else manages, naming each manager.
type ManagedError struct {
	Managers []Manager
}

func (e *ManagedError) Error() string {
	var s []string
	for _, m := range e.Managers {
		s = append(s, m.Refusal())
	}
	return strings.Join(s, "; and ")
}

// Probe is what Managers looks at.
type Probe struct {
	// Root prefixes every path read ("" means "/").
	Root string
	// Interface is the found interface's name (wg0).
	Interface string
	// Port is the tunnel's UDP port: the one the operator asked for, else the found interface's,
	// else DefaultWireGuardPort (0 means that).
	Port int
	// InNamespace says a link of that name is in the machine's network namespace. When it is not,
	// a WireGuard container (by its image, with NET_ADMIN) is taken for the tunnel's even where it
	// publishes another port; when it is, only one on the machine's network or publishing the
	// port is, so a WireGuard container beside the found tunnel is not refused.
	InNamespace bool
	// Containers lists the machine's running containers (container.Engine.RunningContainers);
	// nil is a machine without a Docker engine.
	Containers func(context.Context) ([]container.Running, error)
}

// Managers finds what else manages the interface: a systemd-networkd .netdev naming it with
// Kind=wireguard, a NetworkManager keyfile of type wireguard for it, a container running a
// WireGuard for it. The error says what could not be read (an engine that does not answer, a
// file it cannot open); the managers found are returned with it.
func Managers(ctx context.Context, p Probe) ([]Manager, error) {
	if p.Root == "" {
		p.Root = "/"
	}
	if p.Port == 0 {
		p.Port = DefaultWireGuardPort
	}
	var errs []error
	nd, err := networkdManagers(p.Root, p.Interface)
	errs = append(errs, err)
	nm, err := nmManagers(p.Root, p.Interface)
	errs = append(errs, err)
	out := append(nd, nm...)
	if p.Containers != nil {
		cs, err := p.Containers(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing the machine's containers: %w", err))
		}
		out = append(out, containerManagers(cs, p)...)
	}
	return out, errors.Join(errs...)
}

// networkdDirs are systemd-networkd's directories, the first the strongest: a file of the same
// name in an earlier one masks a later one's (systemd.network(5)).
var networkdDirs = []string{"etc/systemd/network", "run/systemd/network", "usr/local/lib/systemd/network", "usr/lib/systemd/network", "lib/systemd/network"}

// networkdManagers reads every .netdev networkd would load, with its drop-ins, and keeps those
// defining iface as a wireguard netdev. A .netdev masked (a link to /dev/null, or empty) is not
// loaded.
func networkdManagers(root, iface string) ([]Manager, error) {
	var errs []error
	files := map[string]string{} // file name -> strongest path
	dropins := map[string]map[string]string{}
	for _, d := range networkdDirs {
		dir := filepath.Join(root, d)
		ents, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		for _, e := range ents {
			n := e.Name()
			switch {
			case strings.HasSuffix(n, ".netdev"):
				if _, ok := files[n]; !ok {
					files[n] = filepath.Join(dir, n)
				}
			case strings.HasSuffix(n, ".netdev.d"):
				confs, _ := filepath.Glob(filepath.Join(dir, n, "*.conf"))
				base := strings.TrimSuffix(n, ".d")
				if dropins[base] == nil {
					dropins[base] = map[string]string{}
				}
				for _, c := range confs {
					if _, ok := dropins[base][filepath.Base(c)]; !ok {
						dropins[base][filepath.Base(c)] = c
					}
				}
			}
		}
	}
	var out []Manager
	for _, n := range sortedKeys(files) {
		path := files[n]
		if masked(path) {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		vals := iniValues(b, "NetDev")
		for _, c := range sortedKeys(dropins[n]) {
			if db, err := os.ReadFile(dropins[n][c]); err == nil {
				for k, v := range iniValues(db, "NetDev") {
					vals[k] = v
				}
			}
		}
		if vals["Name"] == iface && strings.EqualFold(vals["Kind"], "wireguard") {
			out = append(out, Manager{Kind: ManagerNetworkd, Interface: iface, Path: strings.TrimPrefix(path, strings.TrimSuffix(root, "/"))})
		}
	}
	return out, errors.Join(errs...)
}

// nmDirs are where NetworkManager's keyfile plugin reads connections.
var nmDirs = []string{"etc/NetworkManager/system-connections", "run/NetworkManager/system-connections", "usr/lib/NetworkManager/system-connections"}

// nmManagers reads NetworkManager's keyfiles and keeps the wireguard connections of iface.
func nmManagers(root, iface string) ([]Manager, error) {
	var errs []error
	var out []Manager
	for _, d := range nmDirs {
		dir := filepath.Join(root, d)
		ents, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		for _, e := range ents {
			n := e.Name()
			if e.IsDir() || !nmKeyfile(n) {
				continue
			}
			path := filepath.Join(dir, n)
			b, err := os.ReadFile(path)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			c := iniValues(b, "connection")
			if c["type"] == "wireguard" && c["interface-name"] == iface {
				id := c["id"]
				if id == "" {
					id = strings.TrimSuffix(n, ".nmconnection")
				}
				out = append(out, Manager{Kind: ManagerNetworkManager, Interface: iface, Path: strings.TrimPrefix(path, strings.TrimSuffix(root, "/")), Connection: id})
			}
		}
	}
	return out, errors.Join(errs...)
}

// nmKeyfile says NetworkManager reads a file of that name as a connection: NAME.nmconnection, or
// a name with no extension (older keyfiles); backups and editors' leftovers are ignored, as NM
// ignores them.
func nmKeyfile(n string) bool {
	if strings.HasPrefix(n, ".") || strings.HasSuffix(n, "~") {
		return false
	}
	return strings.HasSuffix(n, ".nmconnection") || !strings.Contains(n, ".")
}

// wireGuardImage says an image's name says it runs WireGuard (wg-easy, linuxserver/wireguard,
// wireguard-ui and their like).
func wireGuardImage(ref string) bool {
	r := strings.ToLower(ref)
	return strings.Contains(r, "wireguard") || strings.Contains(r, "wg-easy")
}

// containerManagers keeps the containers that run the tunnel: one publishing its UDP port, or a
// WireGuard image with NET_ADMIN on the machine's network (it raises the interface there), or
// anywhere when the interface is not in the machine's namespace (it is in the container's).
func containerManagers(cs []container.Running, p Probe) []Manager {
	var out []Manager
	for _, c := range cs {
		m := Manager{Kind: ManagerContainer, Interface: p.Interface, Container: c.Name, Image: c.Image}
		for _, pub := range c.Published {
			if pub.Proto == "udp" && int(pub.HostPort) == p.Port {
				m.Published = fmt.Sprintf("%s/udp", netipJoin(pub.HostIP, pub.HostPort))
				break
			}
		}
		wgc := c.NetAdmin && wireGuardImage(c.Image)
		switch {
		case wgc && c.HostNetwork():
			m.HostNetwork = true
		case m.Published != "":
		case wgc && !p.InNamespace:
			// a WireGuard container publishing another port (51821:51820) or none
			for _, pub := range c.Published {
				if pub.Proto == "udp" {
					m.Published = fmt.Sprintf("%s/udp", netipJoin(pub.HostIP, pub.HostPort))
					break
				}
			}
		default:
			continue
		}
		out = append(out, m)
	}
	return out
}

func netipJoin(ip string, port uint16) string {
	if ip == "" {
		ip = "0.0.0.0"
	}
	if strings.Contains(ip, ":") {
		return "[" + ip + "]:" + strconv.Itoa(int(port))
	}
	return ip + ":" + strconv.Itoa(int(port))
}

// masked says a unit-like file is masked: a link to /dev/null, or empty.
func masked(path string) bool {
	if t, err := os.Readlink(path); err == nil && t == "/dev/null" {
		return true
	}
	st, err := os.Stat(path)
	return err == nil && st.Size() == 0
}

// iniValues reads the keys of one section of a systemd unit-like or keyfile INI file; a key given
// twice keeps its last value. Comments (# or ;) and other sections are skipped.
func iniValues(b []byte, section string) map[string]string {
	out := map[string]string{}
	in := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || l[0] == '#' || l[0] == ';':
		case l[0] == '[':
			in = strings.TrimSpace(strings.Trim(l, "[]")) == section
		case in:
			if k, v, ok := strings.Cut(l, "="); ok {
				out[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// shellWord quotes s for a shell command line when it needs it.
func shellWord(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r == '@' || r == ':' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// containersAt lists the running containers of the Docker engine at host ("" is the default one)
// for Probe.Containers. Nothing is dialled until it is called.
func containersAt(host string) func(context.Context) ([]container.Running, error) {
	return func(ctx context.Context) ([]container.Running, error) {
		eng, err := container.New(host)
		if err != nil {
			return nil, err
		}
		defer eng.Close()
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return eng.RunningContainers(ctx)
	}
}

// refuseManaged refuses the takeover of the found interface f when something else manages it
// (Managers), before anything is sealed or stopped. What it cannot read (an engine that does not
// answer: most machines have none) is logged, not refused.
func (d *Driver) refuseManaged(ctx context.Context, f *wg.Found) error {
	ms, err := Managers(ctx, Probe{Root: d.root, Interface: f.Name, Port: f.ListenPort, InNamespace: true, Containers: d.containers})
	if err != nil {
		d.log.Debug("reading what else manages the found tunnel", "iface", f.Name, "err", err)
	}
	if len(ms) > 0 {
		return &ManagedError{Managers: ms}
	}
	return nil
}

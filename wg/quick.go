package wg

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// QuickFile is what a wg-quick configuration file says, as far as meshd needs it. It is read,
// never written: the predecessor's file stays exactly as it was found.
type QuickFile struct {
	Path       string
	Addresses  []netip.Prefix // Address= (an interface address with its prefix length)
	ListenPort int            // 0 when the file does not say
	PrivateKey *wgtypes.Key   // nil when the file does not say (a PostUp may set it)
	Peers      []QuickPeer
	// Hooks are the file's PreUp, PostUp, PreDown and PostDown lines.
	Hooks Hooks
	// DNS are the DNS= values in order: addresses are name servers, the rest search domains,
	// which wg-quick hands to resolvconf at up.
	DNS []string
}

// Hooks are the commands a wg-quick file runs around its interface, one line each, in order,
// with %i standing for the interface's name: what a forwarding hub's PostUp adds (FORWARD
// accepts, a masquerade) lives nowhere else on the machine and is gone after a reboot unless
// someone runs it again.
type Hooks struct {
	PreUp    []string `json:"pre_up,omitempty"`
	PostUp   []string `json:"post_up,omitempty"`
	PreDown  []string `json:"pre_down,omitempty"`
	PostDown []string `json:"post_down,omitempty"`
}

// Empty says there is no hook at all.
func (h Hooks) Empty() bool {
	return len(h.PreUp)+len(h.PostUp)+len(h.PreDown)+len(h.PostDown) == 0
}

// DNSLine is the bash line that does what wg-quick does with a file's DNS= values at up: the
// addresses as name servers and the rest as search domains, handed to resolvconf for iface
// (under the prefix /etc/resolvconf/interface-order gives, "tun." on Debian's resolvconf).
// "" when there are none.
func DNSLine(values []string, iface string) string {
	var servers, search []string
	for _, v := range values {
		if _, err := netip.ParseAddr(v); err == nil {
			servers = append(servers, v)
		} else {
			search = append(search, v)
		}
	}
	if len(servers) == 0 {
		return ""
	}
	text := ""
	for _, s := range servers {
		text += "nameserver " + s + "\n"
	}
	if len(search) > 0 {
		text += "search " + strings.Join(search, " ") + "\n"
	}
	prefix := `$( [ -f /etc/resolvconf/interface-order ] && sed -n 's/^\([A-Za-z0-9-]*\)\*$/\1./p' /etc/resolvconf/interface-order | head -n 1 )`
	return "printf %b " + shellQuote(text) + ` | resolvconf -a "` + prefix + `"` + shellQuote(iface) + " -m 0 -x"
}

// shellQuote is s as one bash word.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// For is the hook lines with %i replaced by iface, as wg-quick runs them.
func For(lines []string, iface string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.ReplaceAll(l, "%i", iface)
	}
	return out
}

// QuickPeer is one [Peer] section.
type QuickPeer struct {
	PublicKey    wgtypes.Key
	PresharedKey *wgtypes.Key
	AllowedIPs   []netip.Prefix
	// Endpoint is the Endpoint= value as written; it may name a host. EndpointAddr is set when
	// it is a literal address and port.
	Endpoint     string
	EndpointAddr netip.AddrPort
	Keepalive    time.Duration // PersistentKeepalive, 0 when absent or "off"
}

// ReadQuickFile parses the wg-quick file at path. A missing file is an error that satisfies
// errors.Is(err, fs.ErrNotExist).
func ReadQuickFile(path string) (*QuickFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading wg-quick file %s: %w", path, err)
	}
	q, err := ParseQuick(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("wg-quick file %s: %w", path, err)
	}
	q.Path = path
	return q, nil
}

// QuickPath is where wg-quick keeps the file of interface iface under dir (/etc/wireguard).
func QuickPath(dir, iface string) string { return filepath.Join(dir, iface+".conf") }

// ParseQuick reads the wg-quick format: [Interface] and [Peer] sections of Key = Value lines,
// keys case-insensitive, '#' starting a comment, list values comma-separated and repeatable.
// Keys meshd does not use (DNS, MTU, Table, SaveConfig, …) are accepted and ignored.
func ParseQuick(r io.Reader) (*QuickFile, error) {
	q := &QuickFile{}
	section := ""
	var peer *QuickPeer
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = strings.ToLower(strings.TrimSpace(line[1 : len(line)-1]))
			switch section {
			case "interface":
			case "peer":
				q.Peers = append(q.Peers, QuickPeer{})
				peer = &q.Peers[len(q.Peers)-1]
			default:
				return nil, fmt.Errorf("line %d: unknown section [%s]", n, section)
			}
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: %q is not Key = Value", n, line)
		}
		key, val = strings.ToLower(strings.TrimSpace(key)), strings.TrimSpace(val)
		var err error
		switch section {
		case "interface":
			err = q.setInterface(key, val)
		case "peer":
			err = peer.set(key, val)
		default:
			err = errors.New("setting outside a section")
		}
		if err != nil {
			return nil, fmt.Errorf("line %d (%s): %w", n, key, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for i, p := range q.Peers {
		if p.PublicKey == (wgtypes.Key{}) {
			return nil, fmt.Errorf("peer %d has no PublicKey", i+1)
		}
	}
	return q, nil
}

func (q *QuickFile) setInterface(key, val string) error {
	switch key {
	case "address":
		ps, err := parseList(val, parseInterfaceAddress)
		q.Addresses = append(q.Addresses, ps...)
		return err
	case "listenport":
		p, err := strconv.ParseUint(val, 10, 16)
		if err != nil {
			return fmt.Errorf("port %q: %w", val, err)
		}
		q.ListenPort = int(p)
	case "privatekey":
		k, err := wgtypes.ParseKey(val)
		if err != nil {
			return err
		}
		q.PrivateKey = &k
	case "dns":
		for _, v := range strings.Split(val, ",") {
			if v = strings.TrimSpace(v); v != "" {
				q.DNS = append(q.DNS, v)
			}
		}
	case "preup":
		q.Hooks.PreUp = append(q.Hooks.PreUp, val)
	case "postup":
		q.Hooks.PostUp = append(q.Hooks.PostUp, val)
	case "predown":
		q.Hooks.PreDown = append(q.Hooks.PreDown, val)
	case "postdown":
		q.Hooks.PostDown = append(q.Hooks.PostDown, val)
	}
	return nil
}

func (p *QuickPeer) set(key, val string) error {
	switch key {
	case "publickey":
		k, err := wgtypes.ParseKey(val)
		if err != nil {
			return err
		}
		p.PublicKey = k
	case "presharedkey":
		k, err := wgtypes.ParseKey(val)
		if err != nil {
			return err
		}
		p.PresharedKey = &k
	case "allowedips":
		ps, err := parseList(val, parseAllowed)
		p.AllowedIPs = append(p.AllowedIPs, ps...)
		return err
	case "endpoint":
		p.Endpoint = val
		if ap, err := netip.ParseAddrPort(val); err == nil {
			p.EndpointAddr = ap
		}
	case "persistentkeepalive":
		if strings.EqualFold(val, "off") {
			p.Keepalive = 0
			return nil
		}
		s, err := strconv.ParseUint(val, 10, 16)
		if err != nil {
			return fmt.Errorf("keepalive %q: %w", val, err)
		}
		p.Keepalive = time.Duration(s) * time.Second
	}
	return nil
}

func parseList(val string, one func(string) (netip.Prefix, error)) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(val, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := one(s)
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}

// parseInterfaceAddress keeps the host bits (10.77.0.1/24 is the address .1 in the range /24);
// a bare address is a single host, as wg-quick reads it.
func parseInterfaceAddress(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	return netip.ParsePrefix(s)
}

// parseAllowed masks the host bits: an allowed IP is a route, as WireGuard stores it.
func parseAllowed(s string) (netip.Prefix, error) {
	p, err := parseInterfaceAddress(s)
	return p.Masked(), err
}

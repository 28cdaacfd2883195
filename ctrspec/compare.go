package ctrspec

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Change is one difference between a container as it is (have) and as declared (want), said in
// plain words ("capabilities: NET_ADMIN dropped"). Loss marks what the container would lose
// that a service may depend on: a network, an alias or a static address, a capability, a
// privilege, a device or the host's PID namespace, its user, a limit, its health check, or a
// setting no Spec can say. A take that loses something needs the operator's word for it.
type Change struct {
	Field string `json:"field"`
	Text  string `json:"text"`
	Loss  bool   `json:"loss,omitempty"`
}

func (c Change) String() string { return c.Text }

// RuntimeChanges lists the differences of every Runtime field and of what have carries that no
// Spec can say (Unexpressed), each normalised first: capabilities without CAP_ and in any
// order, sizes and durations by value, sets (networks, aliases, devices, ulimits, hosts, tmpfs)
// in any order. A field want leaves at its default (nil entrypoint, "" user) keeps the image's,
// so have's value there is a change back to the image's.
func RuntimeChanges(have, want Spec) []Change {
	var out []Change
	add := func(field string, loss bool, format string, args ...any) {
		out = append(out, Change{Field: field, Text: fmt.Sprintf(format, args...), Loss: loss})
	}
	h, w := have.Runtime, want.Runtime
	if !slices.Equal(h.Entrypoint, w.Entrypoint) {
		add("entrypoint", false, "entrypoint %s → %s", orImage(quoted(h.Entrypoint)), orImage(quoted(w.Entrypoint)))
	}
	if h.WorkingDir != w.WorkingDir {
		add("working_dir", false, "working dir %s → %s", orImage(h.WorkingDir), orImage(w.WorkingDir))
	}
	if h.User != w.User {
		add("user", h.User != "", "user %s → %s", orImage(h.User), orImage(w.User))
	}
	if h.Hostname != w.Hostname {
		add("hostname", false, "hostname %s → %s", orDefault(h.Hostname, "the container id"), orDefault(w.Hostname, "the container id"))
	}
	out = append(out, networkChanges(h, w)...)
	if h.PID != w.PID {
		add("pid", h.PID == "host", "PID namespace %s → %s", orDefault(h.PID, "its own"), orDefault(w.PID, "its own"))
	}
	if h.Privileged != w.Privileged {
		if h.Privileged {
			add("privileged", true, "privileged dropped")
		} else {
			add("privileged", false, "privileged added")
		}
	}
	hAdd, wAdd := capSet(h.CapAdd), capSet(w.CapAdd)
	hDrop, wDrop := capSet(h.CapDrop), capSet(w.CapDrop)
	for _, c := range sortedSet(hAdd) {
		if !wAdd[c] {
			add("cap_add", true, "capabilities: %s dropped", c)
		}
	}
	for _, c := range sortedSet(wAdd) {
		if !hAdd[c] {
			add("cap_add", false, "capabilities: %s added", c)
		}
	}
	for _, c := range sortedSet(wDrop) {
		if !hDrop[c] {
			add("cap_drop", true, "capabilities: %s dropped (cap_drop)", c)
		}
	}
	for _, c := range sortedSet(hDrop) {
		if !wDrop[c] {
			add("cap_drop", false, "capabilities: %s no longer dropped", c)
		}
	}
	setChanges(&out, "devices", "device", normList(h.Devices, normDevice), normList(w.Devices, normDevice), true)
	limit := func(field, what, hv, wv string, parse func(string) (int64, error), format func(int64) string) {
		hn, _ := parse(hv)
		wn, _ := parse(wv)
		switch {
		case hn == wn:
		case wn == 0:
			add(field, true, "%s %s removed", what, format(hn))
		case hn == 0:
			add(field, false, "%s %s set", what, format(wn))
		default:
			add(field, false, "%s %s → %s", what, format(hn), format(wn))
		}
	}
	limit("memory", "memory limit", h.Memory, w.Memory, ParseSize, FormatSize)
	limit("memory_swap", "memory+swap limit", h.MemorySwap, w.MemorySwap, parseSwap, formatSwap)
	limit("cpus", "CPU limit", h.CPUs, w.CPUs, ParseCPUs, FormatCPUs)
	limit("pids_limit", "process limit", fmt.Sprint(h.PidsLimit), fmt.Sprint(w.PidsLimit), parseInt, func(n int64) string { return fmt.Sprint(n) })
	hu, wu := ulimitMap(h.Ulimits), ulimitMap(w.Ulimits)
	for _, k := range slices.Sorted(maps.Keys(hu)) {
		switch wv, ok := wu[k]; {
		case !ok:
			add("ulimits", true, "ulimit %s removed", hu[k])
		case wv != hu[k]:
			add("ulimits", false, "ulimit %s → %s", hu[k], wv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(wu)) {
		if _, ok := hu[k]; !ok {
			add("ulimits", false, "ulimit %s set", wu[k])
		}
	}
	hh, wh := healthText(h.Healthcheck), healthText(w.Healthcheck)
	switch {
	case hh == wh:
	case w.Healthcheck == nil:
		add("healthcheck", true, "health check %s removed", hh)
	case h.Healthcheck == nil:
		add("healthcheck", false, "health check %s set", wh)
	default:
		add("healthcheck", w.Healthcheck.Test[0] == "NONE", "health check %s → %s", hh, wh)
	}
	if hl, wl := logText(h.Logging), logText(w.Logging); hl != wl {
		add("logging", false, "logging %s → %s", hl, wl)
	}
	setChanges(&out, "extra_hosts", "extra host", normList(h.ExtraHosts, normExtraHost), normList(w.ExtraHosts, normExtraHost), false)
	for _, l := range []struct {
		f, what string
		h, w    []string
	}{{"dns", "DNS servers", h.DNS, w.DNS}, {"dns_search", "DNS search", h.DNSSearch, w.DNSSearch}, {"dns_opt", "DNS options", h.DNSOptions, w.DNSOptions}} {
		if !slices.Equal(l.h, l.w) {
			add(l.f, false, "%s [%s] → [%s]", l.what, strings.Join(l.h, " "), strings.Join(l.w, " "))
		}
	}
	if h.StopSignal != w.StopSignal {
		add("stop_signal", false, "stop signal %s → %s", orImage(h.StopSignal), orImage(w.StopSignal))
	}
	if ht, wt := stopText(h.StopTimeout), stopText(w.StopTimeout); ht != wt {
		add("stop_timeout", false, "stop timeout %s → %s", ht, wt)
	}
	setChanges(&out, "tmpfs", "tmpfs", normList(h.Tmpfs, nil), normList(w.Tmpfs, nil), false)
	if h.ReadOnly != w.ReadOnly {
		add("read_only", false, "read-only root %v → %v", h.ReadOnly, w.ReadOnly)
	}
	if h.Init != w.Init {
		add("init", false, "init %v → %v", h.Init, w.Init)
	}
	setChanges(&out, "security_opt", "security option", normList(h.SecurityOpt, nil), normList(w.SecurityOpt, nil), false)
	for _, u := range have.Unexpressed {
		if !slices.Contains(want.Unexpressed, u) { // a found container's record has its own
			add("unexpressed", true, "%s lost (a manifest cannot say it)", u)
		}
	}
	return out
}

// Losses are the changes that lose something, in words.
func Losses(cs []Change) []string {
	var out []string
	for _, c := range cs {
		if c.Loss {
			out = append(out, c.Text)
		}
	}
	return out
}

// EffectiveNetworks are the networks a container with r is on, in order: its Networks, else
// its network mode ("bridge" when none is said).
func (r Runtime) EffectiveNetworks() []Network {
	if len(r.Networks) > 0 {
		return r.Networks
	}
	mode := r.NetworkMode
	if mode == "" || mode == "default" {
		mode = "bridge"
	}
	return []Network{{Name: mode}}
}

func networkChanges(h, w Runtime) []Change {
	var out []Change
	hn, wn := map[string]Network{}, map[string]Network{}
	var hNames, wNames []string
	for _, n := range h.EffectiveNetworks() {
		hn[n.Name] = n
		hNames = append(hNames, n.Name)
	}
	for _, n := range w.EffectiveNetworks() {
		wn[n.Name] = n
		wNames = append(wNames, n.Name)
	}
	var left, joined []string
	for _, n := range hNames {
		if _, ok := wn[n]; !ok {
			left = append(left, n)
		}
	}
	for _, n := range wNames {
		if _, ok := hn[n]; !ok {
			joined = append(joined, n)
		}
	}
	lost := func(n Network) string {
		var s []string
		for _, a := range n.Aliases {
			s = append(s, "alias "+a+" lost")
		}
		for _, a := range []string{n.IPv4, n.IPv6} {
			if a != "" {
				s = append(s, "address "+a+" lost")
			}
		}
		if len(s) == 0 {
			return ""
		}
		return ", " + strings.Join(s, ", ")
	}
	if len(left) == 1 && len(joined) == 1 {
		out = append(out, Change{Field: "networks", Loss: true,
			Text: fmt.Sprintf("network %s → %s%s", left[0], joined[0], lost(hn[left[0]]))})
	} else {
		for _, n := range left {
			out = append(out, Change{Field: "networks", Loss: true, Text: fmt.Sprintf("network %s left%s", n, lost(hn[n]))})
		}
		for _, n := range joined {
			out = append(out, Change{Field: "networks", Text: "network " + n + " joined"})
		}
	}
	for _, name := range hNames {
		w, ok := wn[name]
		if !ok {
			continue
		}
		h := hn[name]
		ha, wa := capSetRaw(h.Aliases), capSetRaw(w.Aliases)
		for _, a := range sortedSet(ha) {
			if !wa[a] {
				out = append(out, Change{Field: "networks", Loss: true, Text: fmt.Sprintf("network %s: alias %s lost", name, a)})
			}
		}
		for _, a := range sortedSet(wa) {
			if !ha[a] {
				out = append(out, Change{Field: "networks", Text: fmt.Sprintf("network %s: alias %s added", name, a)})
			}
		}
		for _, p := range []struct{ h, w string }{{h.IPv4, w.IPv4}, {h.IPv6, w.IPv6}} {
			if p.h != p.w {
				out = append(out, Change{Field: "networks", Loss: p.h != "",
					Text: fmt.Sprintf("network %s: address %s → %s", name, orDefault(p.h, "the engine's choice"), orDefault(p.w, "the engine's choice"))})
			}
		}
	}
	return out
}

// setChanges appends what is in have and not in want (a loss when loss) and the other way.
func setChanges(out *[]Change, field, what string, have, want []string, loss bool) {
	hs, ws := capSetRaw(have), capSetRaw(want)
	for _, x := range have {
		if !ws[x] {
			*out = append(*out, Change{Field: field, Loss: loss, Text: fmt.Sprintf("%s %s removed", what, x)})
		}
	}
	for _, x := range want {
		if !hs[x] {
			*out = append(*out, Change{Field: field, Text: fmt.Sprintf("%s %s added", what, x)})
		}
	}
}

// normList normalises each of xs with norm (nil: as it is) and sorts them.
func normList(xs []string, norm func(string) string) []string {
	var out []string
	for _, x := range xs {
		if norm != nil {
			x = norm(x)
		}
		out = append(out, x)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func normDevice(s string) string {
	if d, err := ParseDevice(s); err == nil {
		return d.String()
	}
	return s
}

func normExtraHost(s string) string {
	if n, a, err := ParseExtraHost(s); err == nil {
		return n + ":" + a.String()
	}
	return s
}

func capSet(cs []string) map[string]bool {
	m := map[string]bool{}
	for _, c := range cs {
		m[NormCap(c)] = true
	}
	return m
}

func capSetRaw(xs []string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

func sortedSet(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }

func ulimitMap(us []string) map[string]string {
	m := map[string]string{}
	for _, s := range us {
		if u, err := ParseUlimit(s); err == nil {
			m[u.Name] = u.String()
		} else {
			m[s] = s
		}
	}
	return m
}

// HealthText is a health check in words: its test, then what differs from the engine's defaults.
func healthText(h *Healthcheck) string {
	if h == nil {
		return "(none)"
	}
	s := "[" + strings.Join(h.Test, " ") + "]"
	for _, d := range []struct{ k, v string }{{"interval", h.Interval}, {"timeout", h.Timeout}, {"start period", h.StartPeriod}} {
		if n, err := ParseDuration(d.v); err == nil && n != 0 {
			s += " " + d.k + " " + n.String()
		}
	}
	if h.Retries != 0 {
		s += fmt.Sprintf(" retries %d", h.Retries)
	}
	return s
}

func logText(l *Logging) string {
	if l == nil {
		return "the engine's default"
	}
	s := l.Driver
	for _, k := range slices.Sorted(maps.Keys(l.Options)) {
		s += " " + k + "=" + l.Options[k]
	}
	return s
}

func stopText(t *int) string {
	if t == nil {
		return "the engine's default"
	}
	return fmt.Sprintf("%ds", *t)
}

func parseSwap(s string) (int64, error) {
	if s == "-1" {
		return -1, nil
	}
	return ParseSize(s)
}

func formatSwap(n int64) string {
	if n < 0 {
		return "unlimited"
	}
	return FormatSize(n)
}

func parseInt(s string) (int64, error) {
	var n int64
	_, err := fmt.Sscan(s, &n)
	return n, err
}

func quoted(xs []string) string {
	if xs == nil {
		return ""
	}
	if slices.Equal(xs, NoEntrypoint()) {
		return "none"
	}
	return fmt.Sprintf("%q", xs)
}

func orImage(s string) string { return orDefault(s, "the image's default") }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

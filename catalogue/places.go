package catalogue

import (
	"fmt"
	"path"
	"strings"
)

// placeRoots are the directories under which a module that does not say privileged: true has a
// place of its own, named after it: /etc/NAME, /srv/NAME, /var/lib/NAME, /var/log/NAME, /opt/NAME,
// and NAME's data directory under meshd's own (meshdDataDir/NAME, where the foundation's store
// and registry keep their data; checkSecret keeps meshd's own names there out).
var placeRoots = []string{"/etc", "/srv", "/var/lib", "/var/log", "/opt", meshdDataDir}

// systemNames are the names the system, its root-run daemons and meshd have for themselves
// under the place roots: the directories the deny list of command versions 4 and 5 guarded
// (rootFiles, rootMounts) and what issue 34 found beside them. A module of such a name has no
// place of its own: /etc/systemd or /var/lib/dpkg is the system's, whoever is named so. A
// service's own name (nginx, postgresql) is not here: its directories are its own.
var systemNames = []string{
	// meshd and the container engines
	"meshd", "docker", "containerd", "containers", "runc",
	// what runs as root: init, cron, the package manager, the kernel's helpers
	"systemd", "init", "init.d", "rc.d", "cron", "cron.d", "cron.hourly", "cron.daily",
	"cron.weekly", "cron.monthly", "crontab", "anacron", "anacrontab", "apt", "dpkg", "ucf",
	"logrotate", "logrotate.d", "sysctl.d", "tmpfiles.d", "udev", "modprobe.d", "modules-load.d",
	"kernel", "initramfs-tools", "default", "network", "networkd-dispatcher", "NetworkManager",
	"dhcp", "ppp", "acpi", "update-motd.d", "supervisor", "environment.d", "binfmt.d",
	"sysconfig", "grub.d", "selinux", "apparmor", "apparmor.d", "audit", "rsyslog.d",
	// who may log in, and as whom
	"ssh", "sudo", "sudoers", "sudoers.d", "pam.d", "security", "polkit-1", "passwd", "shadow",
	"group", "gshadow", "profile", "profile.d", "skel", "login.defs", "environment",
	// what every program loads
	"ld.so.conf.d", "ld.so.preload", "ld.so.conf", "alternatives", "ssl", "ca-certificates",
	// the firewalls meshd meets
	"ufw", "iptables", "nftables", "firewalld", "wireguard",
}

// SystemName says whether name is the system's own under the place roots: a module of that name
// has no place of its own.
func SystemName(name string) bool {
	for _, s := range systemNames {
		if s == name {
			return true
		}
	}
	return false
}

// Places are module's own places on a machine, or nil when its name is the system's
// (SystemName): what a module that does not say privileged: true may write and mount.
func Places(module string) []string {
	if module == "" || SystemName(module) || contains(meshdDataNames, module) {
		return nil
	}
	out := make([]string, len(placeRoots))
	for i, r := range placeRoots {
		out[i] = r + "/" + module
	}
	return out
}

// aliases are the system's second spellings of its own trees: on a merged-/usr machine /bin,
// /sbin and /lib are symlinks into /usr, and /var/run is one to /run. A path is judged where it
// leads, not as written.
var aliases = []struct{ from, to string }{
	{"/var/run", "/run"},
	{"/bin", "/usr/bin"},
	{"/sbin", "/usr/sbin"},
	{"/lib", "/usr/lib"},
	{"/lib64", "/usr/lib64"},
	{"/lib32", "/usr/lib32"},
	{"/libx32", "/usr/libx32"},
}

// Normalise is the machine path p as the system spells it: cleaned (no "..", no "//"), and the
// system's aliases (aliases) rewritten to what they lead to.
func Normalise(p string) string {
	p = path.Clean("/" + p)
	for _, a := range aliases {
		if p == a.from || strings.HasPrefix(p, a.from+"/") {
			return a.to + p[len(a.from):]
		}
	}
	return p
}

// Outside says why the machine path p is not in module's own places, or "" when it is. It
// judges p as Normalise spells it.
func Outside(module, p string) string {
	n := Normalise(p)
	places := Places(module)
	for _, pl := range places {
		if n == pl || strings.HasPrefix(n, pl+"/") {
			return ""
		}
	}
	at := n
	if n != p {
		at = fmt.Sprintf("%s (that is, %s)", p, n)
	}
	if len(places) == 0 {
		return fmt.Sprintf("%s is outside the module's own places: %s is the system's own name, so a module of that name has none", at, module)
	}
	return fmt.Sprintf("%s is outside the module's own places (%s)", at, strings.Join(places, ", "))
}

// Reach is one declaration of a resolved module that gives it root on the machine: a file or a
// mount outside its own places (Path), or a setuid or setgid mode. Field is the manifest's
// field; What says it; Why says why it is root-equivalent.
type Reach struct {
	Field, Path, What, Why string
}

// Reaches lists what in r goes beyond the module's own places or gives root by its mode,
// whatever the module says of itself: what a privileged module is named for, and what an
// unprivileged one is refused for.
func (r *Resolved) Reaches() []Reach {
	var out []Reach
	for i, f := range r.Files {
		if Outside(r.Module, f.Path) != "" {
			out = append(out, Reach{fmt.Sprintf("files[%d].path", i), f.Path, "file " + f.Path, fileWhy(f.Path)})
		}
		if bits := setIDBits(f.Mode); bits != "" {
			out = append(out, Reach{fmt.Sprintf("files[%d].mode", i), "", fmt.Sprintf("file %s is %s (mode %s)", f.Path, bits, f.Mode),
				"whoever runs the file runs it as its owner"})
		}
	}
	for i, c := range r.Containers {
		for j, v := range c.Volumes {
			host, _, _ := strings.Cut(v, ":")
			if !NamedVolume(host) && Outside(r.Module, host) != "" {
				out = append(out, Reach{fmt.Sprintf("containers[%d].volumes[%d]", i, j), host,
					fmt.Sprintf("container %s mounts %s", c.Name, host), mountWhy(host)})
			}
		}
	}
	return out
}

// CheckPlaces refuses, with node's settings filled in (nil: the defaults), every file and mount
// outside the module's own places and every setuid or setgid mode, unless the module says
// privileged: true: the allowlist the record applies from command version 6 (fsm). Each refusal
// names the field, where the path is, the setting that made it, and why it is root-equivalent.
func (m *Module) CheckPlaces(node map[string]string) error {
	return m.refuseUnsaid(node, (*Resolved).Reaches)
}

// refuseUnsaid refuses, with node's settings filled in and unless the module says privileged:
// true, each root-equivalent thing found lists: its field, where it reaches (a path beyond the
// module's places, with the setting that made it) and why it is root.
func (m *Module) refuseUnsaid(node map[string]string, found func(*Resolved) []Reach) error {
	if m.Privileged {
		return nil
	}
	r, err := m.Resolve(node)
	if err != nil {
		return err
	}
	var errs Errors
	for _, x := range found(r) {
		msg := fmt.Sprintf("%s: root on the machine (%s): a module that means it must say privileged: true, "+
			"and be added with --privileged%s", x.What, x.Why, m.via(m.rawOf(x.Field)))
		if x.Path != "" {
			msg = Outside(m.Name, x.Path) + "; " + msg
		}
		errs = append(errs, &FieldError{File: m.Source, Line: m.line(x.Field), Field: x.Field, Msg: msg})
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// rawOf is the manifest's own text of a path or volume field ("files[0].path",
// "containers[0].volumes[1]"), before settings are filled in; "" for another field.
func (m *Module) rawOf(field string) string {
	var i, j int
	if _, err := fmt.Sscanf(field, "files[%d].path", &i); err == nil && i < len(m.Files) {
		return m.Files[i].Path
	}
	if _, err := fmt.Sscanf(field, "containers[%d].volumes[%d]", &i, &j); err == nil && i < len(m.Containers) && j < len(m.Containers[i].Volumes) {
		return m.Containers[i].Volumes[j]
	}
	return ""
}

package catalogue

import (
	"fmt"
	"strconv"
	"strings"
)

// rootFiles are places where a file gives whoever wrote it root on the machine: it grants root,
// runs as root, or is read by every root login. They were the record's deny list for command
// versions 4 and 5 (CheckDenied), kept as they were so a log of then replays as it applied; now
// they say why a file outside a module's places is root-equivalent (fileWhy). A path under a
// directory here counts too.
var rootFiles = []struct{ path, why string }{
	{"/etc/sudoers", "sudo reads it"},
	{"/etc/sudoers.d", "sudo reads it"},
	{"/etc/cron.d", "cron runs it as root"},
	{"/etc/crontab", "cron runs it as root"},
	{"/etc/cron.hourly", "cron runs it as root"},
	{"/etc/cron.daily", "cron runs it as root"},
	{"/etc/cron.weekly", "cron runs it as root"},
	{"/etc/cron.monthly", "cron runs it as root"},
	{"/var/spool/cron", "cron runs it"},
	{"/etc/systemd", "systemd runs its units as root"},
	{"/lib/systemd", "systemd runs its units as root"},
	{"/usr/lib/systemd", "systemd runs its units as root"},
	{"/run/systemd", "systemd runs its units as root"},
	{"/etc/init.d", "init runs it as root"},
	{"/etc/rc.local", "init runs it as root"},
	{"/etc/ld.so.preload", "every program loads it"},
	{"/etc/ld.so.conf.d", "every program's libraries are found through it"},
	{"/etc/passwd", "it names the users"},
	{"/etc/shadow", "it holds the users' passwords"},
	{"/etc/group", "it names the groups"},
	{"/etc/gshadow", "it holds the groups' passwords"},
	{"/etc/pam.d", "every login asks it"},
	{"/etc/security", "every login asks it"},
	{"/etc/profile", "every login shell runs it"},
	{"/etc/profile.d", "every login shell runs it"},
	{"/etc/bash.bashrc", "every root shell runs it"},
	{"/etc/ssh", "sshd reads it"},
	{"/etc/apt", "apt runs its hooks as root"},
	{"/etc/docker", "the container engine reads it"},
	{"/root", "it is root's home"},
	{"/usr/local/sbin", "root's PATH finds it first"},
	{"/usr/local/bin", "root's PATH finds it"},
}

// rootMounts are host paths whose mount into a container gives the container root on the machine
// (the deny list of command versions 4 and 5, as rootFiles):
// the engine's socket and state, meshd's operator socket, root's home, the system's own trees. A
// mount of one of them or of a directory above one needs privileged: true, and so does a path
// under one marked under (a mount of /etc/webapp is the app's; of /root/.ssh, root's).
var rootMounts = []struct {
	path, why string
	under     bool
}{
	{"/var/run/docker.sock", "the engine's socket starts containers as root", true},
	{"/run/docker.sock", "the engine's socket starts containers as root", true},
	{"/var/lib/docker", "the engine's state", true},
	{"/run/containerd", "the container runtime's socket", true},
	{"/run/meshd", "meshd's operator socket", true},
	{"/var/run/meshd", "meshd's operator socket", true},
	{"/root", "root's home", true},
	{"/etc", "the machine's configuration", false},
	{"/boot", "the machine's kernel", true},
	{"/usr", "the machine's programs", false},
	{"/bin", "the machine's programs", false},
	{"/sbin", "the machine's programs", false},
	{"/lib", "the machine's libraries", false},
}

// rootFile says why a file at p makes its module root-equivalent, or "".
func rootFile(p string) string {
	if strings.HasSuffix(p, "/authorized_keys") || strings.HasSuffix(p, "/authorized_keys2") {
		return "sshd lets in whoever holds a key it names"
	}
	for _, f := range rootFiles {
		if p == f.path || strings.HasPrefix(p, f.path+"/") {
			return f.why
		}
	}
	return ""
}

// rootMount says why mounting the host path p makes its module root-equivalent, or "".
func rootMount(p string) string {
	if p == "/" {
		return "it is the whole file system"
	}
	for _, m := range rootMounts {
		if p == m.path || strings.HasPrefix(m.path, p+"/") || (m.under && strings.HasPrefix(p, m.path+"/")) {
			return m.why + ": " + m.path
		}
	}
	return rootFile(p)
}

// setIDBits says a file mode carries setuid or setgid, or "".
func setIDBits(mode string) string {
	v, err := strconv.ParseUint(mode, 8, 32)
	if err != nil {
		return ""
	}
	switch {
	case v&0o4000 != 0 && v&0o2000 != 0:
		return "setuid and setgid"
	case v&0o4000 != 0:
		return "setuid"
	case v&0o2000 != 0:
		return "setgid"
	}
	return ""
}

// privilegedNeed is the refusal of a root-equivalent declaration in a module that did not say so.
func privilegedNeed(what, why string) string {
	return fmt.Sprintf("%s gives the module root on the machine (%s): a module that means it must say privileged: true", what, why)
}

// moreRoot are what the deny list above missed (issue 34, finding 1), kept to say why a path
// outside a module's own places is root-equivalent; the allowlist (places.go) refuses them, and
// every other path outside, whether it is named here or not.
var moreRoot = []struct{ path, why string }{
	{"/etc/sudo.conf", "sudo reads it"},
	{"/usr/bin/sudo", "it runs as root"},
	{"/etc/ld.so.conf", "every program's libraries are found through it"},
	{"/etc/environment", "every login reads it"},
	{"/etc/logrotate.d", "logrotate runs its scripts as root"},
	{"/etc/sysctl.d", "it sets the kernel's parameters (kernel.core_pattern runs a program as root)"},
	{"/etc/tmpfiles.d", "systemd-tmpfiles creates and changes files by it as root"},
	{"/etc/udev", "udev runs its rules' programs as root"},
	{"/etc/modprobe.d", "the kernel's module loader runs its install commands as root"},
	{"/etc/anacrontab", "cron runs it as root"},
	{"/etc/dpkg", "dpkg runs its hooks as root"},
	{"/etc/update-motd.d", "every login runs it as root"},
	{"/etc/polkit-1", "polkit grants root by its rules"},
	{"/usr/bin", "the machine's programs, which root runs"},
	{"/usr/sbin", "the machine's programs, which root runs"},
	{"/usr/lib", "the machine's libraries and modules, which root loads"},
	{"/usr/lib64", "the machine's libraries, which root loads"},
	{"/usr/local", "root's PATH finds it"},
	{"/run/dbus", "the system bus: root's services act on its messages"},
	{"/run/containerd", "the container runtime's socket starts containers as root"},
	{"/run/docker", "the engine's state and sockets start containers as root"},
	{"/var/lib/containerd", "the container runtime's state"},
}

// outsideWhy is why a path outside a module's own places is root-equivalent when no table names
// it: root writes there, where the system or another service reads or runs it.
const outsideWhy = "root writes it outside the module's own places, where the system or another service reads or runs it"

// fileWhy says why a file at the machine path p, outside its module's places, is root-equivalent.
func fileWhy(p string) string {
	n := Normalise(p)
	if why := rootFile(n); why != "" {
		return why
	}
	for _, f := range moreRoot {
		if n == f.path || strings.HasPrefix(n, f.path+"/") {
			return f.why
		}
	}
	return outsideWhy
}

// mountWhy says why a mount of the machine path p, outside its module's places, is
// root-equivalent.
func mountWhy(p string) string {
	n := Normalise(p)
	if why := rootMount(n); why != "" {
		return why
	}
	for _, f := range moreRoot {
		if n == f.path || strings.HasPrefix(n, f.path+"/") || strings.HasPrefix(f.path, n+"/") {
			return f.why
		}
	}
	return "the container writes the machine's " + n + " as root, outside the module's own places"
}

// RootEquivalent lists what in the resolved module gives it root on the machine (Reaches and
// its containers' Powers), each with why: what `module show`, add, assign, the preview and the
// status page name for a privileged module.
func (r *Resolved) RootEquivalent() []string {
	var out []string
	for _, x := range append(r.Reaches(), r.Powers()...) {
		out = append(out, fmt.Sprintf("%s (%s)", x.What, x.Why))
	}
	return out
}

// CheckDenied refuses what the deny list (rootFiles, rootMounts) says gives the module root on the
// machine, with node's settings filled in (nil: the defaults), unless the module says privileged:
// true: the record's judgement for commands of versions 4 and 5, kept so that a log written then
// replays as it applied. From version 6 the record judges by the allowlist (CheckPlaces). Both
// are apart from Parse and Resolve so that the record applies each only to its own versions.
func (m *Module) CheckDenied(node map[string]string) error {
	if m.Privileged {
		return nil
	}
	r, err := m.Resolve(node)
	if err != nil {
		return err
	}
	var errs Errors
	add := func(field, msg string) {
		errs = append(errs, &FieldError{File: m.Source, Line: m.line(field), Field: field, Msg: msg})
	}
	for i, f := range r.Files {
		if why := rootFile(f.Path); why != "" {
			add(fmt.Sprintf("files[%d].path", i), privilegedNeed("a file at "+f.Path, why)+m.via(m.Files[i].Path))
		}
		if bits := setIDBits(f.Mode); bits != "" {
			add(fmt.Sprintf("files[%d].mode", i), privilegedNeed("mode "+f.Mode+" ("+bits+")", "whoever runs the file runs it as its owner"))
		}
	}
	for i, c := range r.Containers {
		for j, v := range c.Volumes {
			host, _, _ := strings.Cut(v, ":")
			if why := rootMount(host); why != "" {
				add(fmt.Sprintf("containers[%d].volumes[%d]", i, j), privilegedNeed("a mount of "+host, why)+m.via(m.Containers[i].Volumes[j]))
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

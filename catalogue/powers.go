package catalogue

import (
	"fmt"
	"slices"
	"strings"

	"meshd/ctrspec"
)

// defaultCaps is the engine's default capability set: a container is given these whatever it
// asks, so adding one grants nothing more.
var defaultCaps = []string{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
	"NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}

// Powers lists what the resolved module's containers hold over the machine beyond a
// container's own: privileged, devices, capabilities beyond the engine's default set, the
// host's network or process namespace. Each is root on the machine for whoever controls the
// container, as a mount of the engine's socket is; the record judges them from command
// version 7 (fsm).
func (r *Resolved) Powers() []Reach {
	var out []Reach
	for i, c := range r.Containers {
		f := fmt.Sprintf("containers[%d]", i)
		if c.Privileged {
			out = append(out, Reach{Field: f + ".privileged", What: "container " + c.Name + " is privileged",
				Why: "it has every capability and every device of the machine"})
		}
		for j, d := range c.Devices {
			out = append(out, Reach{Field: fmt.Sprintf("%s.devices[%d]", f, j), What: fmt.Sprintf("container %s has device %s", c.Name, d),
				Why: "it reaches the machine's hardware"})
		}
		for j, cp := range c.CapAdd {
			if n := ctrspec.NormCap(cp); !slices.Contains(defaultCaps, n) {
				out = append(out, Reach{Field: fmt.Sprintf("%s.cap_add[%d]", f, j), What: fmt.Sprintf("container %s adds capability %s", c.Name, n),
					Why: "beyond the engine's default set, it acts on the machine's kernel"})
			}
		}
		if c.NetworkMode == "host" {
			out = append(out, Reach{Field: f + ".network_mode", What: "container " + c.Name + " is on the host's network",
				Why: "it shares the machine's network namespace: its links, its firewall and every port"})
		}
		if c.PID == "host" {
			out = append(out, Reach{Field: f + ".pid", What: "container " + c.Name + " shares the host's processes",
				Why: "it sees and signals every process of the machine"})
		}
	}
	return out
}

// CheckPowers refuses, unless the module says privileged: true, every container setting that
// gives it power over the machine (Powers): the record's judgement from command version 7,
// beside CheckPlaces. Each refusal names the field and why.
func (m *Module) CheckPowers(node map[string]string) error {
	return m.refuseUnsaid(node, (*Resolved).Powers)
}

// Vocabulary7 lists the fields of m that a manifest could not say before command version 7
// (each container's Runtime keys, and named volumes): a command of an earlier version that
// carries one is refused as it was then.
func (m *Module) Vocabulary7() []string {
	var out []string
	for i, c := range m.Containers {
		for _, k := range c.Runtime.Used() {
			out = append(out, fmt.Sprintf("containers[%d].%s", i, k))
		}
		for j, v := range c.Volumes {
			if host, _, _ := strings.Cut(v, ":"); NamedVolume(host) {
				out = append(out, fmt.Sprintf("containers[%d].volumes[%d]", i, j))
			}
		}
	}
	return out
}

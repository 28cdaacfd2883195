package container

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/distribution/reference"
	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/go-connections/nat"

	"meshd/ctrspec"
)

// Observed is one container as the engine reports it.
type Observed struct {
	ID         string
	Name       string
	ImageRef   string // the reference the container was created with
	ImageID    string // the image the container runs
	RefImageID string // what ImageRef resolves to on the engine now; "" if it resolves to nothing
	Running    bool
	Status     string // created, running, paused, restarting, exited, dead

	// Managed is true when the container carries ctrspec.LabelManaged=true; Module is its
	// ctrspec.LabelModule.
	// Neither decides whether it is found: that is the host's record store's call.
	Managed bool
	Module  string

	// Spec is the container reconstructed as a module would declare it: what the image already
	// sets (env, labels, command) is left out, so a predecessor's container reads as what its
	// creator asked for.
	Spec ctrspec.Spec

	Env    map[string]string // every variable, the image's included
	Labels map[string]string // every label, the image's included
	Cmd    []string          // the command the container runs (after the entrypoint)
	Ports  []Published       // what is bound now, as the engine reports it

	// What the container's image sets, used to tell declared values from inherited ones.
	// ImageKnown is false when the image is gone from the engine.
	ImageKnown  bool
	ImageEnv    map[string]string
	ImageLabels map[string]string
	ImageCmd    []string
	image       *imageRuntime   // nil when the image is gone
	defs        *engineDefaults // nil when the engine's defaults are not known

	// Raw is the engine's inspect JSON, the container's full configuration.
	Raw json.RawMessage
}

// Published is one port a container publishes on the machine.
type Published struct {
	Container     string // container name
	ContainerID   string
	Module        string // the container's ctrspec.LabelModule, "" when it is not meshd's
	HostIP        string // as the engine reports it: 0.0.0.0, ::, 127.0.0.1 ...
	HostPort      uint16
	ContainerPort uint16
	Proto         string
}

func (p Published) String() string {
	return fmt.Sprintf("%s %s/%s -> %d/%s",
		p.Container, netipJoin(p.HostIP, p.HostPort), p.Proto, p.ContainerPort, p.Proto)
}

func netipJoin(ip string, port uint16) string {
	if a, err := netip.ParseAddr(ip); err == nil {
		return netip.AddrPortFrom(a, port).String()
	}
	return ip + ":" + strconv.Itoa(int(port))
}

// observe builds an Observed from the engine's answers. img is nil when the container's image is
// gone; refImageID is what the container's reference resolves to now.
func observe(c dcontainer.InspectResponse, raw []byte, img *image.InspectResponse, refImageID string, defs *engineDefaults) Observed {
	o := Observed{Raw: raw, RefImageID: refImageID, Env: map[string]string{}, Labels: map[string]string{}}
	if c.ContainerJSONBase != nil {
		o.ID = c.ID
		o.Name = strings.TrimPrefix(c.Name, "/")
		o.ImageID = c.Image
		if c.State != nil {
			o.Running = c.State.Running
			o.Status = string(c.State.Status)
		}
	}
	if img != nil && img.Config != nil {
		o.ImageKnown = true
		o.ImageEnv = envMap(img.Config.Env)
		o.ImageLabels = maps0(img.Config.Labels)
		o.ImageCmd = slices.Clone(img.Config.Cmd)
		o.image = &imageRuntime{Entrypoint: img.Config.Entrypoint, WorkingDir: img.Config.WorkingDir,
			User: img.Config.User, StopSignal: img.Config.StopSignal, Healthcheck: img.Config.Healthcheck}
	} else if img != nil {
		o.ImageKnown = true
		o.image = &imageRuntime{}
	}
	o.defs = defs
	o.Spec.Runtime = observeRuntime(c, o.image, defs)
	o.Spec.Unexpressed = defs.unexpressed(raw)
	o.Spec.Name = o.Name
	if cfg := c.Config; cfg != nil {
		o.ImageRef = cfg.Image
		o.Env = envMap(cfg.Env)
		o.Labels = maps0(cfg.Labels)
		o.Cmd = slices.Clone([]string(cfg.Cmd))
	}
	o.Managed = o.Labels[ctrspec.LabelManaged] == "true"
	o.Module = o.Labels[ctrspec.LabelModule]
	o.Spec.Image = o.ImageRef
	o.Spec.Env = declaredOnly(o.Env, o.ImageEnv, o.ImageKnown)
	o.Spec.Labels = declaredOnly(o.Labels, o.ImageLabels, o.ImageKnown)
	if len(o.Cmd) > 0 && (!o.ImageKnown || !slices.Equal(o.Cmd, o.ImageCmd)) {
		o.Spec.Cmd = slices.Clone(o.Cmd)
	}
	if hc := c.HostConfig; hc != nil {
		for _, b := range bindingsOf(hc.PortBindings) {
			o.Spec.Ports = append(o.Spec.Ports, b.String())
		}
		o.Spec.Volumes = append(o.Spec.Volumes, volumesOf(hc)...)
		o.Spec.Restart = formatRestart(string(hc.RestartPolicy.Name), hc.RestartPolicy.MaximumRetryCount)
	} else {
		o.Spec.Restart = ctrspec.RestartNo
	}
	if ns := c.NetworkSettings; ns != nil {
		for port, bs := range ns.Ports {
			for _, b := range bs {
				hp, _ := strconv.ParseUint(b.HostPort, 10, 16)
				o.Ports = append(o.Ports, Published{
					Container: o.Name, ContainerID: o.ID, Module: o.Module,
					HostIP: b.HostIP, HostPort: uint16(hp),
					ContainerPort: uint16(port.Int()), Proto: port.Proto(),
				})
			}
		}
		sortPublished(o.Ports)
	}
	return o
}

// bindingsOf normalises the engine's configured port bindings, sorted.
func bindingsOf(pm nat.PortMap) []ctrspec.PortBinding {
	var out []ctrspec.PortBinding
	for port, bs := range pm {
		for _, b := range bs {
			hp, _ := strconv.ParseUint(b.HostPort, 10, 16)
			out = append(out, ctrspec.PortBinding{
				HostIP: normHostIP(b.HostIP), HostPort: uint16(hp),
				ContainerPort: uint16(port.Int()), Proto: strings.ToLower(port.Proto()),
			})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func normHostIP(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	if a.IsUnspecified() && a.Is4() {
		return ""
	}
	return a.String()
}

// volumesOf lists binds and bind/volume mounts in the catalogue's form, sorted.
func volumesOf(hc *dcontainer.HostConfig) []string {
	var out []string
	for _, b := range hc.Binds {
		if v, err := ctrspec.ParseVolume(b); err == nil {
			out = append(out, v.String())
		} else {
			out = append(out, b)
		}
	}
	for _, m := range hc.Mounts {
		if m.Type != "bind" && m.Type != "volume" {
			continue
		}
		if m.Source == "" { // an anonymous volume
			continue
		}
		out = append(out, ctrspec.Volume{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly}.String())
	}
	sort.Strings(out)
	return out
}

func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func maps0(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// declaredOnly drops what the image sets to the same value. With the image unknown nothing is
// dropped: the reconstruction then shows everything.
func declaredOnly(all, fromImage map[string]string, imageKnown bool) map[string]string {
	out := map[string]string{}
	for k, v := range all {
		if imageKnown && inherited(k, v, fromImage, true) {
			continue
		}
		out[k] = v
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func sortPublished(ps []Published) {
	sort.Slice(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.HostPort != b.HostPort {
			return a.HostPort < b.HostPort
		}
		if a.Proto != b.Proto {
			return a.Proto < b.Proto
		}
		if a.HostIP != b.HostIP {
			return a.HostIP < b.HostIP
		}
		return a.Container < b.Container
	})
}

// NormalizeImageRef returns ref in the engine's canonical form (docker.io/library/echo:latest for
// "echo"); a reference it cannot parse (an image id) is returned as it is.
func NormalizeImageRef(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	return reference.TagNameOnly(named).String()
}

// Diff lists the real differences between what spec declares and the observed container, each
// starting with the field it is about (image, env, ports, volumes, restart, labels, cmd). An
// empty list means the container must not be recreated. How each field is normalised is in the
// package documentation.
func Diff(spec ctrspec.Spec, o Observed) []string {
	var d []string
	// image
	if NormalizeImageRef(spec.Image) != NormalizeImageRef(o.ImageRef) {
		d = append(d, fmt.Sprintf("image: declared %s, container runs %s", spec.Image, o.ImageRef))
	} else if o.RefImageID != "" && o.ImageID != "" && o.RefImageID != o.ImageID {
		d = append(d, fmt.Sprintf("image: %s now resolves to %s, container runs %s",
			spec.Image, shortID(o.RefImageID), shortID(o.ImageID)))
	}
	// env: values are never printed, they may be secrets
	for _, k := range sortedKeys(spec.Env) {
		if v, ok := o.Env[k]; !ok {
			d = append(d, fmt.Sprintf("env %s: declared, not set in the container", k))
		} else if v != spec.Env[k] {
			d = append(d, fmt.Sprintf("env %s: value differs from the declared one", k))
		}
	}
	for _, k := range sortedKeys(o.Env) {
		if _, ok := spec.Env[k]; ok || inherited(k, o.Env[k], o.ImageEnv, o.ImageKnown) {
			continue
		}
		d = append(d, fmt.Sprintf("env %s: set in the container, not declared", k))
	}
	// ports
	want := map[string]bool{}
	for _, p := range spec.Ports {
		b, err := ctrspec.ParsePort(p)
		if err != nil {
			d = append(d, fmt.Sprintf("ports: declared %q is invalid: %v", p, err))
			continue
		}
		want[b.String()] = true
	}
	d = append(d, setDiff("ports", want, o.Spec.Ports, "declared, not published", "published, not declared")...)
	// volumes
	want = map[string]bool{}
	for _, s := range spec.Volumes {
		v, err := ctrspec.ParseVolume(s)
		if err != nil {
			d = append(d, fmt.Sprintf("volumes: declared %q is invalid: %v", s, err))
			continue
		}
		want[v.String()] = true
	}
	d = append(d, setDiff("volumes", want, o.Spec.Volumes, "declared, not mounted", "mounted, not declared")...)
	// restart
	if name, n, err := ctrspec.ParseRestart(spec.Restart); err != nil {
		d = append(d, fmt.Sprintf("restart: declared %q is invalid: %v", spec.Restart, err))
	} else if have := o.Spec.Restart; formatRestart(name, n) != have && !(have == "" && name == ctrspec.RestartNo) {
		d = append(d, fmt.Sprintf("restart: declared %s, container has %s", formatRestart(name, n), have))
	}
	// labels
	for _, k := range sortedKeys(spec.Labels) {
		if v, ok := o.Labels[k]; !ok {
			d = append(d, fmt.Sprintf("labels %s: declared %q, not set", k, spec.Labels[k]))
		} else if v != spec.Labels[k] {
			d = append(d, fmt.Sprintf("labels %s: declared %q, container has %q", k, spec.Labels[k], v))
		}
	}
	for _, k := range sortedKeys(o.Labels) {
		if _, ok := spec.Labels[k]; ok || inherited(k, o.Labels[k], o.ImageLabels, o.ImageKnown) {
			continue
		}
		d = append(d, fmt.Sprintf("labels %s: container has %q, not declared", k, o.Labels[k]))
	}
	// cmd
	if spec.Cmd != nil {
		have := o.Cmd
		if len(have) == 0 {
			have = o.ImageCmd
		}
		if !slices.Equal(spec.Cmd, have) {
			d = append(d, fmt.Sprintf("cmd: declared %q, container runs %q", spec.Cmd, have))
		}
	} else if o.ImageKnown && len(o.Cmd) > 0 && !slices.Equal(o.Cmd, o.ImageCmd) {
		d = append(d, fmt.Sprintf("cmd: declared the image's default %q, container runs %q", o.ImageCmd, o.Cmd))
	}
	declared, have := spec, o.asDeclared(spec)
	declared.Logging = o.defs.ownLog(spec.Logging)
	if o.defs == nil {
		// The engine's default log configuration is not known (its probe failed): the
		// container's is not judged, rather than every container recreated for it.
		declared.Logging = have.Logging
	}
	for _, c := range ctrspec.RuntimeChanges(have, declared) {
		d = append(d, c.Text)
	}
	return d
}

// asDeclared is the container's reconstruction with what spec declares explicitly and the image
// sets by default counted as declared: an entrypoint, working dir, user, stop signal or health
// check that spec names and the image already has is no difference.
func (o Observed) asDeclared(spec ctrspec.Spec) ctrspec.Spec {
	have := o.Spec
	img := o.image
	if img == nil {
		return have
	}
	if have.Entrypoint == nil && spec.Entrypoint != nil && slices.Equal(spec.Entrypoint, img.Entrypoint) {
		have.Entrypoint = spec.Entrypoint
	}
	if have.WorkingDir == "" && spec.WorkingDir != "" && spec.WorkingDir == img.WorkingDir {
		have.WorkingDir = spec.WorkingDir
	}
	if have.User == "" && spec.User != "" && spec.User == img.User {
		have.User = spec.User
	}
	if have.StopSignal == "" && spec.StopSignal != "" && spec.StopSignal == img.StopSignal {
		have.StopSignal = spec.StopSignal
	}
	return have
}

// inherited says whether an undeclared key may be ignored: the image sets it to the same value,
// or the image is unknown and cannot be asked.
func inherited(k, v string, fromImage map[string]string, imageKnown bool) bool {
	if !imageKnown {
		return true
	}
	iv, ok := fromImage[k]
	return ok && iv == v || !ok && k == "PATH" && v == enginePath
}

// enginePath is the PATH an engine puts into a container whose image sets none (some versions
// write it into the container's configuration).
const enginePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func setDiff(field string, want map[string]bool, have []string, missing, extra string) []string {
	var d []string
	haveSet := map[string]bool{}
	for _, h := range have {
		haveSet[h] = true
	}
	for _, w := range sortedKeys(want) {
		if !haveSet[w] {
			d = append(d, fmt.Sprintf("%s: %s %s", field, w, missing))
		}
	}
	for _, h := range have {
		if !want[h] {
			d = append(d, fmt.Sprintf("%s: %s %s", field, h, extra))
		}
	}
	return d
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// formatRestart is the engine's restart policy in a Spec's form.
func formatRestart(name string, maxRetries int) string {
	if name == "" {
		name = ctrspec.RestartNo
	}
	if name == ctrspec.RestartOnFailure && maxRetries > 0 {
		return fmt.Sprintf("%s:%d", name, maxRetries)
	}
	return name
}

// sortedKeys are m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

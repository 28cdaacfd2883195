package container

// Every key `docker inspect` shows of a container, and what meshd does with it: reproduced from
// the Spec, or why not. A key missing here is one nobody has thought about; the real-engine test
// (TestInspectEveryKeyClassified) walks a container's inspect JSON and fails on it, so nothing is
// dropped by being forgotten.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	dcontainer "github.com/docker/docker/api/types/container"

	"meshd/ctrspec"
)

// keyKind is what becomes of one inspect key.
type keyKind int

const (
	// keySpec: reproduced from the Spec (the reason names the field); a round trip keeps it.
	keySpec keyKind = iota
	// keyState: runtime state, not configuration (running, pid, health, restart count).
	keyState
	// keyAssigned: what the engine assigns each container itself (ids, paths, addresses).
	keyAssigned
	// keyImage: what the image sets, not the container (a Spec inherits it by naming the image).
	keyImage
	// keyDerived: follows from other keys that are reproduced (privileged clears the masked paths).
	keyDerived
	// keyDefault: a Spec cannot say it; a container created from a Spec has the engine's default.
	// A found container away from that default has it in Spec.Unexpressed: a difference, and a
	// loss if it is replaced.
	keyDefault
)

// inspectKey says what one key (dotted path; * is any map key) is, and why.
type inspectKey struct {
	kind keyKind
	why  string
}

// inspectKeys classifies every key of the engine's container inspect JSON. An object whose key
// is here is classified whole; one not here is walked into, and each of its keys must be here.
var inspectKeys = map[string]inspectKey{
	"Id":                      {keyAssigned, "the container's id"},
	"Created":                 {keyState, "when it was created"},
	"Path":                    {keySpec, "entrypoint and cmd: the first word run"},
	"Args":                    {keySpec, "entrypoint and cmd: the rest of what is run"},
	"State":                   {keyState, "running, paused, pid, exit code, health: what it is doing"},
	"Image":                   {keySpec, "image: the id the reference resolved to (compared by id)"},
	"ResolvConfPath":          {keyAssigned, "the engine's file for it"},
	"HostnamePath":            {keyAssigned, "the engine's file for it"},
	"HostsPath":               {keyAssigned, "the engine's file for it"},
	"LogPath":                 {keyAssigned, "the engine's file for it"},
	"Name":                    {keySpec, "name"},
	"RestartCount":            {keyState, "how often it was restarted"},
	"Driver":                  {keyAssigned, "the engine's storage driver"},
	"Platform":                {keyAssigned, "the engine's platform"},
	"MountLabel":              {keyDerived, "SELinux label: the engine's, or security_opt label="},
	"ProcessLabel":            {keyDerived, "SELinux label: the engine's, or security_opt label="},
	"AppArmorProfile":         {keyDerived, "the engine's default profile, or security_opt apparmor="},
	"ExecIDs":                 {keyState, "commands being executed in it"},
	"GraphDriver":             {keyAssigned, "the engine's storage of its layers"},
	"Mounts":                  {keySpec, "volumes (binds and named volumes; anonymous ones are the image's)"},
	"SizeRw":                  {keyState, "its layer's size"},
	"SizeRootFs":              {keyState, "its file system's size"},
	"ImageManifestDescriptor": {keyAssigned, "the platform manifest the engine picked for the image (newer engines)"},

	"Config.Hostname":        {keySpec, "hostname (the engine's short id when not said)"},
	"Config.Domainname":      {keyDefault, "domain name"},
	"Config.User":            {keySpec, "user"},
	"Config.AttachStdin":     {keyDefault, "attached terminal"},
	"Config.AttachStdout":    {keyDefault, "attached terminal"},
	"Config.AttachStderr":    {keyDefault, "attached terminal"},
	"Config.ExposedPorts":    {keySpec, "ports (with what the image exposes)"},
	"Config.Tty":             {keyDefault, "a terminal"},
	"Config.OpenStdin":       {keyDefault, "standard input kept open"},
	"Config.StdinOnce":       {keyDefault, "standard input closed after one attach"},
	"Config.Env":             {keySpec, "env (with what the image sets)"},
	"Config.Cmd":             {keySpec, "cmd"},
	"Config.Healthcheck":     {keySpec, "healthcheck"},
	"Config.ArgsEscaped":     {keyImage, "Windows images' command form"},
	"Config.Image":           {keySpec, "image"},
	"Config.Volumes":         {keyImage, "anonymous volumes the image declares"},
	"Config.WorkingDir":      {keySpec, "working_dir"},
	"Config.Entrypoint":      {keySpec, "entrypoint"},
	"Config.NetworkDisabled": {keyDefault, "networking disabled"},
	"Config.MacAddress":      {keyDefault, "a fixed MAC address"},
	"Config.OnBuild":         {keyImage, "build instructions for images made from this one"},
	"Config.Labels":          {keySpec, "labels (with what the image sets)"},
	"Config.StopSignal":      {keySpec, "stop_signal"},
	"Config.StopTimeout":     {keySpec, "stop_timeout"},
	"Config.Shell":           {keyImage, "the image's shell for its build"},

	"HostConfig.Binds":                {keySpec, "volumes"},
	"HostConfig.ContainerIDFile":      {keyAssigned, "where the CLI that created it wrote its id"},
	"HostConfig.LogConfig":            {keySpec, "logging (the engine's default driver and options when not said)"},
	"HostConfig.NetworkMode":          {keySpec, "network_mode, or the first of networks"},
	"HostConfig.PortBindings":         {keySpec, "ports"},
	"HostConfig.RestartPolicy":        {keySpec, "restart"},
	"HostConfig.AutoRemove":           {keyDefault, "removed when it stops"},
	"HostConfig.VolumeDriver":         {keyDefault, "a volume driver"},
	"HostConfig.VolumesFrom":          {keyDefault, "another container's volumes"},
	"HostConfig.ConsoleSize":          {keyAssigned, "the size of the terminal that created it"},
	"HostConfig.Annotations":          {keyDefault, "runtime annotations"},
	"HostConfig.CapAdd":               {keySpec, "cap_add"},
	"HostConfig.CapDrop":              {keySpec, "cap_drop"},
	"HostConfig.CgroupnsMode":         {keyDefault, "cgroup namespace"},
	"HostConfig.Dns":                  {keySpec, "dns"},
	"HostConfig.DnsOptions":           {keySpec, "dns_opt"},
	"HostConfig.DnsSearch":            {keySpec, "dns_search"},
	"HostConfig.ExtraHosts":           {keySpec, "extra_hosts"},
	"HostConfig.GroupAdd":             {keyDefault, "supplementary groups"},
	"HostConfig.IpcMode":              {keyDefault, "IPC namespace"},
	"HostConfig.Cgroup":               {keyDefault, "another container's cgroup"},
	"HostConfig.Links":                {keyDefault, "legacy links"},
	"HostConfig.OomScoreAdj":          {keyDefault, "OOM score adjustment"},
	"HostConfig.PidMode":              {keySpec, "pid"},
	"HostConfig.Privileged":           {keySpec, "privileged"},
	"HostConfig.PublishAllPorts":      {keyDefault, "every exposed port published"},
	"HostConfig.ReadonlyRootfs":       {keySpec, "read_only"},
	"HostConfig.SecurityOpt":          {keySpec, "security_opt"},
	"HostConfig.StorageOpt":           {keyDefault, "storage driver options"},
	"HostConfig.Tmpfs":                {keySpec, "tmpfs"},
	"HostConfig.UTSMode":              {keyDefault, "UTS namespace"},
	"HostConfig.UsernsMode":           {keyDefault, "user namespace"},
	"HostConfig.ShmSize":              {keyDefault, "/dev/shm size"},
	"HostConfig.Sysctls":              {keyDefault, "kernel parameters"},
	"HostConfig.Runtime":              {keyDefault, "OCI runtime"},
	"HostConfig.Isolation":            {keyDefault, "Windows isolation"},
	"HostConfig.CpuShares":            {keyDefault, "CPU shares"},
	"HostConfig.Memory":               {keySpec, "memory"},
	"HostConfig.NanoCpus":             {keySpec, "cpus"},
	"HostConfig.CgroupParent":         {keyDefault, "parent cgroup"},
	"HostConfig.BlkioWeight":          {keyDefault, "block I/O weight"},
	"HostConfig.BlkioWeightDevice":    {keyDefault, "block I/O weight"},
	"HostConfig.BlkioDeviceReadBps":   {keyDefault, "block I/O limit"},
	"HostConfig.BlkioDeviceWriteBps":  {keyDefault, "block I/O limit"},
	"HostConfig.BlkioDeviceReadIOps":  {keyDefault, "block I/O limit"},
	"HostConfig.BlkioDeviceWriteIOps": {keyDefault, "block I/O limit"},
	"HostConfig.CpuPeriod":            {keyDefault, "CPU period"},
	"HostConfig.CpuQuota":             {keyDefault, "CPU quota"},
	"HostConfig.CpuRealtimePeriod":    {keyDefault, "real-time CPU period"},
	"HostConfig.CpuRealtimeRuntime":   {keyDefault, "real-time CPU runtime"},
	"HostConfig.CpusetCpus":           {keyDefault, "CPUs it may run on"},
	"HostConfig.CpusetMems":           {keyDefault, "memory nodes it may use"},
	"HostConfig.Devices":              {keySpec, "devices"},
	"HostConfig.DeviceCgroupRules":    {keyDefault, "device cgroup rules"},
	"HostConfig.DeviceRequests":       {keyDefault, "GPUs and other device requests"},
	"HostConfig.KernelMemory":         {keyDefault, "kernel memory limit"},
	"HostConfig.KernelMemoryTCP":      {keyDefault, "kernel TCP memory limit"},
	"HostConfig.MemoryReservation":    {keyDefault, "memory reservation"},
	"HostConfig.MemorySwap":           {keySpec, "memory_swap (twice memory when not said)"},
	"HostConfig.MemorySwappiness":     {keyDefault, "swappiness"},
	"HostConfig.OomKillDisable":       {keyDefault, "OOM killer disabled"},
	"HostConfig.PidsLimit":            {keySpec, "pids_limit"},
	"HostConfig.Ulimits":              {keySpec, "ulimits"},
	"HostConfig.CpuCount":             {keyDefault, "Windows CPU count"},
	"HostConfig.CpuPercent":           {keyDefault, "Windows CPU percent"},
	"HostConfig.IOMaximumIOps":        {keyDefault, "Windows I/O limit"},
	"HostConfig.IOMaximumBandwidth":   {keyDefault, "Windows I/O limit"},
	"HostConfig.Mounts":               {keySpec, "volumes (given as mounts)"},
	"HostConfig.MaskedPaths":          {keyDerived, "the engine's list; privileged or security_opt systempaths=unconfined empties it"},
	"HostConfig.ReadonlyPaths":        {keyDerived, "the engine's list; privileged or security_opt systempaths=unconfined empties it"},
	"HostConfig.Init":                 {keySpec, "init"},

	"NetworkSettings.Bridge":                         {keyAssigned, "the engine's network state"},
	"NetworkSettings.SandboxID":                      {keyAssigned, "the engine's network state"},
	"NetworkSettings.SandboxKey":                     {keyAssigned, "the engine's network state"},
	"NetworkSettings.HairpinMode":                    {keyAssigned, "the engine's network state"},
	"NetworkSettings.LinkLocalIPv6Address":           {keyAssigned, "the engine's network state"},
	"NetworkSettings.LinkLocalIPv6PrefixLen":         {keyAssigned, "the engine's network state"},
	"NetworkSettings.Ports":                          {keyState, "ports bound now (the configured ones are HostConfig.PortBindings)"},
	"NetworkSettings.SecondaryIPAddresses":           {keyAssigned, "the engine's network state"},
	"NetworkSettings.SecondaryIPv6Addresses":         {keyAssigned, "the engine's network state"},
	"NetworkSettings.EndpointID":                     {keyAssigned, "the default bridge's endpoint"},
	"NetworkSettings.Gateway":                        {keyAssigned, "the default bridge's endpoint"},
	"NetworkSettings.GlobalIPv6Address":              {keyAssigned, "the default bridge's endpoint"},
	"NetworkSettings.GlobalIPv6PrefixLen":            {keyAssigned, "the default bridge's endpoint"},
	"NetworkSettings.IPAddress":                      {keyAssigned, "the default bridge's endpoint"},
	"NetworkSettings.IPPrefixLen":                    {keyAssigned, "the default bridge's endpoint"},
	"NetworkSettings.IPv6Gateway":                    {keyAssigned, "the default bridge's endpoint"},
	"NetworkSettings.MacAddress":                     {keyAssigned, "the default bridge's endpoint"},
	"NetworkSettings.Networks.*.IPAMConfig":          {keySpec, "networks[].ipv4_address, ipv6_address"},
	"NetworkSettings.Networks.*.Links":               {keyDefault, "legacy links"},
	"NetworkSettings.Networks.*.Aliases":             {keySpec, "networks[].aliases (and the short id the engine adds)"},
	"NetworkSettings.Networks.*.MacAddress":          {keyAssigned, "the endpoint's address"},
	"NetworkSettings.Networks.*.DriverOpts":          {keyDefault, "endpoint driver options"},
	"NetworkSettings.Networks.*.GwPriority":          {keyDefault, "gateway priority"},
	"NetworkSettings.Networks.*.NetworkID":           {keyAssigned, "the network's id"},
	"NetworkSettings.Networks.*.EndpointID":          {keyAssigned, "the endpoint's id"},
	"NetworkSettings.Networks.*.Gateway":             {keyAssigned, "the endpoint's address"},
	"NetworkSettings.Networks.*.IPAddress":           {keyAssigned, "the endpoint's address"},
	"NetworkSettings.Networks.*.IPPrefixLen":         {keyAssigned, "the endpoint's address"},
	"NetworkSettings.Networks.*.IPv6Gateway":         {keyAssigned, "the endpoint's address"},
	"NetworkSettings.Networks.*.GlobalIPv6Address":   {keyAssigned, "the endpoint's address"},
	"NetworkSettings.Networks.*.GlobalIPv6PrefixLen": {keyAssigned, "the endpoint's address"},
	"NetworkSettings.Networks.*.DNSNames":            {keyDerived, "the container's name, aliases and short id"},
}

// classifyPath finds the entry for path (segments), matching * for a map's key; ok is false
// when there is none.
func classifyPath(path []string) (string, inspectKey, bool) {
	for k, v := range inspectKeys {
		ks := strings.Split(k, ".")
		if len(ks) != len(path) {
			continue
		}
		match := true
		for i := range ks {
			if ks[i] != "*" && ks[i] != path[i] {
				match = false
				break
			}
		}
		if match {
			return k, v, true
		}
	}
	return "", inspectKey{}, false
}

// unclassified walks raw (a container's inspect JSON) and lists every key inspectKeys does not
// classify, as dotted paths.
func unclassified(raw []byte) ([]string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, err
	}
	var out []string
	var walk func(m map[string]json.RawMessage, path []string)
	walk = func(m map[string]json.RawMessage, path []string) {
		for k, v := range m {
			p := append(slices.Clone(path), k)
			if _, _, ok := classifyPath(p); ok {
				continue
			}
			var child map[string]json.RawMessage
			if json.Unmarshal(v, &child) == nil && child != nil {
				walk(child, p)
				continue
			}
			out = append(out, strings.Join(p, "."))
		}
	}
	walk(top, nil)
	sort.Strings(out)
	return out, nil
}

// engineDefaults are what the engine gives a container created with nothing said: learned once
// per Engine from a probe container (created, never started, removed at once), since they
// depend on the engine's version and its daemon configuration (log driver and options, IPC and
// cgroup namespace modes).
type engineDefaults struct {
	config, hostConfig map[string]json.RawMessage
	log                dcontainer.LogConfig
}

// sameLog says lc is the engine's default log configuration.
func (d *engineDefaults) sameLog(lc dcontainer.LogConfig) bool {
	if lc.Type != d.log.Type || len(lc.Config) != len(d.log.Config) {
		return false
	}
	for k, v := range lc.Config {
		if d.log.Config[k] != v {
			return false
		}
	}
	return true
}

// ownLog is l without the options the engine adds to its default driver's: the engine merges
// its own log options into a container's that names its default driver, so only the others
// are the container's own.
func (d *engineDefaults) ownLog(l *ctrspec.Logging) *ctrspec.Logging {
	if d == nil || l == nil || l.Driver != d.log.Type {
		return l
	}
	out := &ctrspec.Logging{Driver: l.Driver}
	for k, v := range l.Options {
		if d.log.Config[k] != v {
			if out.Options == nil {
				out.Options = map[string]string{}
			}
			out.Options[k] = v
		}
	}
	return out
}

// unexpressed lists the keyDefault keys of raw (an inspect JSON) whose value differs from the
// engine's default, each as "Section.Key value".
func (d *engineDefaults) unexpressed(raw []byte) []string {
	var c struct {
		Config, HostConfig map[string]json.RawMessage
	}
	if d == nil || json.Unmarshal(raw, &c) != nil {
		return nil
	}
	var out []string
	for _, sec := range []struct {
		name     string
		have, df map[string]json.RawMessage
	}{{"Config", c.Config, d.config}, {"HostConfig", c.HostConfig, d.hostConfig}} {
		for _, k := range sortedKeys(sec.have) {
			if ik, ok := inspectKeys[sec.name+"."+k]; !ok || ik.kind != keyDefault {
				continue
			}
			if !sameJSON(sec.have[k], sec.df[k]) {
				out = append(out, fmt.Sprintf("%s.%s %s", sec.name, k, sec.have[k]))
			}
		}
	}
	return out
}

// sameJSON compares two JSON values, counting null, absent, "", 0, false, [] and {} as the same.
func sameJSON(a, b json.RawMessage) bool {
	empty := func(v json.RawMessage) bool {
		switch string(bytes.TrimSpace(v)) {
		case "", "null", `""`, "0", "false", "[]", "{}", "[0,0]":
			return true
		}
		return false
	}
	if empty(a) && empty(b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// defaultsCache holds an Engine's defaults once learned.
type defaultsCache struct {
	mu     sync.Mutex
	defs   *engineDefaults
	failed time.Time // the last probe that could not be made: tried again a minute later
}

// defaults are the engine's defaults, learned with a probe of image the first time they are
// asked for; nil (and nothing judged unexpressed) when the probe cannot be made, tried again a
// minute later.
func (e *Engine) defaults(ctx context.Context, image string) *engineDefaults {
	e.defs.mu.Lock()
	defer e.defs.mu.Unlock()
	if e.defs.defs != nil || image == "" || time.Since(e.defs.failed) < time.Minute {
		return e.defs.defs
	}
	name := "meshd-probe-" + randomHex(6)
	resp, err := e.cli.ContainerCreate(ctx, &dcontainer.Config{Image: image}, &dcontainer.HostConfig{}, nil, nil, name)
	if err != nil {
		e.defs.failed = time.Now()
		e.log.Warn("container: could not probe the engine's defaults; what no Spec can say is not judged until it can",
			"image", image, "err", err)
		return nil
	}
	defer func() {
		_ = e.cli.ContainerRemove(context.WithoutCancel(ctx), resp.ID, dcontainer.RemoveOptions{Force: true})
	}()
	c, raw, err := e.cli.ContainerInspectWithRaw(ctx, resp.ID, false)
	if err != nil || c.HostConfig == nil {
		return nil
	}
	var parts struct {
		Config, HostConfig map[string]json.RawMessage
	}
	if json.Unmarshal(raw, &parts) != nil {
		return nil
	}
	e.defs.defs = &engineDefaults{config: parts.Config, hostConfig: parts.HostConfig, log: c.HostConfig.LogConfig}
	return e.defs.defs
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"

	"meshd/ctrspec"
)

// DefaultHost is the engine's address on a machine with one engine.
const DefaultHost = "unix:///var/run/docker.sock"

// Engine is one Docker engine, reached at one address. It is safe for concurrent use and
// survives the engine going away and coming back: make it once per agent.
type Engine struct {
	cli         *client.Client
	host        string
	log         *slog.Logger
	stopTimeout time.Duration

	// images are the images inspected by id (a container's image: "sha256:…", the digest of the
	// image's configuration, so what inspecting it says of its config never changes): a pass
	// observing the same containers asks the engine for each image once, not every pass.
	imgMu  sync.Mutex
	images map[string]*image.InspectResponse

	defs defaultsCache
}

// maxImages bounds Engine.images; past it the cache starts again.
const maxImages = 512

// imageByID inspects the image whose id (content digest) is id, from the cache when it was
// inspected before. A reference that is not an id is never cached: a tag can move.
func (e *Engine) imageByID(ctx context.Context, id string) (*image.InspectResponse, error) {
	cacheable := strings.HasPrefix(id, "sha256:")
	if cacheable {
		e.imgMu.Lock()
		ii := e.images[id]
		e.imgMu.Unlock()
		if ii != nil {
			return ii, nil
		}
	}
	ii, err := e.cli.ImageInspect(ctx, id)
	if err != nil {
		return nil, err
	}
	if cacheable && ii.ID == id {
		e.imgMu.Lock()
		if e.images == nil || len(e.images) >= maxImages {
			e.images = map[string]*image.InspectResponse{}
		}
		e.images[id] = &ii
		e.imgMu.Unlock()
	}
	return &ii, nil
}

// Option configures an Engine.
type Option func(*Engine)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(e *Engine) { e.log = l } }

// WithStopTimeout sets how long a container is given to stop before it is killed (default 10s).
func WithStopTimeout(d time.Duration) Option { return func(e *Engine) { e.stopTimeout = d } }

// New returns the engine at host: "" for DefaultHost, a unix socket path
// ("/run/lab/hub/docker.sock") or any address the Docker client takes (unix://, tcp://). It does
// not contact the engine; the API version is negotiated on first contact, so an engine that
// appears later is fine.
func New(host string, opts ...Option) (*Engine, error) {
	switch {
	case host == "":
		host = DefaultHost
	case strings.HasPrefix(host, "/"):
		host = "unix://" + host
	}
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker client for %s: %w", host, err)
	}
	e := &Engine{cli: cli, host: host, log: slog.Default(), stopTimeout: 10 * time.Second}
	for _, o := range opts {
		o(e)
	}
	return e, nil
}

// Host is the engine's address.
func (e *Engine) Host() string { return e.host }

// Close releases the client's idle connections.
func (e *Engine) Close() error { return e.cli.Close() }

// wrap names the operation and turns a transport failure into an *UnreachableError.
func (e *Engine) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if client.IsErrConnectionFailed(err) {
		// Connections kept alive to an engine that went away are dead; drop them so the next
		// call dials afresh.
		_ = e.cli.Close()
		return &UnreachableError{Host: e.host, Op: op, Err: err}
	}
	return fmt.Errorf("%s (engine %s): %w", op, e.host, err)
}

// Ping checks the engine answers. Its error matches ErrEngineUnreachable when it does not.
func (e *Engine) Ping(ctx context.Context) error {
	_, err := e.cli.Ping(ctx)
	return e.wrap("ping", err)
}

// Inspect observes the container named name. found is false (with a nil error) when there is
// none. The name must match exactly: an id prefix that happens to equal name does not count.
func (e *Engine) Inspect(ctx context.Context, name string) (o Observed, found bool, err error) {
	c, raw, err := e.cli.ContainerInspectWithRaw(ctx, name, false)
	if cerrdefs.IsNotFound(err) {
		return Observed{}, false, nil
	}
	if err != nil {
		return Observed{}, false, e.wrap("inspect container "+name, err)
	}
	if c.ContainerJSONBase == nil || (strings.TrimPrefix(c.Name, "/") != name && c.ID != name) {
		return Observed{}, false, nil
	}
	o, err = e.observe(ctx, c, raw)
	if err != nil {
		return Observed{}, false, err
	}
	return o, true, nil
}

func (e *Engine) observe(ctx context.Context, c dcontainer.InspectResponse, raw []byte) (Observed, error) {
	name := strings.TrimPrefix(c.Name, "/")
	var img *image.InspectResponse
	if c.Image != "" {
		ii, err := e.imageByID(ctx, c.Image)
		switch {
		case err == nil:
			img = ii
		case !cerrdefs.IsNotFound(err):
			return Observed{}, e.wrap("inspect image "+c.Image+" of container "+name, err)
		}
	}
	var refID string
	if c.Config != nil && c.Config.Image != "" {
		if img != nil && c.Config.Image == c.Image {
			refID = img.ID
		} else {
			ri, err := e.cli.ImageInspect(ctx, c.Config.Image)
			switch {
			case err == nil:
				refID = ri.ID
			case !cerrdefs.IsNotFound(err):
				return Observed{}, e.wrap("inspect image "+c.Config.Image+" of container "+name, err)
			}
		}
	}
	return observe(c, raw, img, refID, e.defaults(ctx, c.Image)), nil
}

// Diff is the package's Diff, for callers holding an Engine.
func (e *Engine) Diff(spec ctrspec.Spec, o Observed) []string { return Diff(spec, o) }

// ImageID returns the id of the image ref names; its error matches ErrImageMissing when the
// engine has no such image.
func (e *Engine) ImageID(ctx context.Context, ref string) (string, error) {
	ii, err := e.cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return "", &ImageMissingError{Image: ref, Host: e.host}
	}
	if err != nil {
		return "", e.wrap("inspect image "+ref, err)
	}
	return ii.ID, nil
}

func (e *Engine) checkImage(ctx context.Context, spec ctrspec.Spec) error {
	_, err := e.cli.ImageInspect(ctx, spec.Image)
	if cerrdefs.IsNotFound(err) {
		return &ImageMissingError{Image: spec.Image, Container: spec.Name, Host: e.host}
	}
	return e.wrap(fmt.Sprintf("container %s: inspect image %s", spec.Name, spec.Image), err)
}

// Create creates the container spec declares and starts it, returning its id. The image must be
// on the machine (ErrImageMissing otherwise). If it cannot start (a port already held, say) the
// half-made container is removed again, so the next attempt starts clean.
func (e *Engine) Create(ctx context.Context, spec ctrspec.Spec) (string, error) {
	if err := spec.Validate(); err != nil {
		return "", err
	}
	if err := e.checkImage(ctx, spec); err != nil {
		return "", err
	}
	return e.createAndStart(ctx, spec)
}

func (e *Engine) createAndStart(ctx context.Context, spec ctrspec.Spec) (string, error) {
	resp, err := e.create(ctx, spec, spec.Name)
	if err != nil {
		if cerrdefs.IsConflict(err) {
			return "", fmt.Errorf("create container %s: the name is in use (engine %s): %w", spec.Name, e.host, err)
		}
		if cerrdefs.IsNotFound(err) {
			return "", &ImageMissingError{Image: spec.Image, Container: spec.Name, Host: e.host}
		}
		return "", e.wrap("create container "+spec.Name, err)
	}
	if err := e.cli.ContainerStart(ctx, resp.ID, dcontainer.StartOptions{}); err != nil {
		rmErr := e.cli.ContainerRemove(context.WithoutCancel(ctx), resp.ID, dcontainer.RemoveOptions{Force: true})
		if rmErr != nil && !cerrdefs.IsNotFound(rmErr) {
			e.log.Warn("container: could not remove a container that failed to start",
				"container", spec.Name, "id", shortID(resp.ID), "err", rmErr)
		}
		return "", e.wrap(fmt.Sprintf("start container %s (ports %s)", spec.Name, strings.Join(spec.Ports, ", ")), err)
	}
	e.log.Info("container: created and started", "container", spec.Name, "id", shortID(resp.ID), "image", spec.Image)
	return resp.ID, nil
}

// create creates the container spec declares under name, not started: its networks made first
// when missing, and joined after the first before it starts.
func (e *Engine) create(ctx context.Context, spec ctrspec.Spec, name string) (dcontainer.CreateResponse, error) {
	if err := e.ensureNetworks(ctx, spec); err != nil {
		return dcontainer.CreateResponse{}, err
	}
	cfg, hc, nc := engineConfig(spec)
	resp, err := e.cli.ContainerCreate(ctx, cfg, hc, nc, nil, name)
	if err != nil {
		return resp, err
	}
	if err := e.connectNetworks(ctx, resp.ID, spec); err != nil {
		_ = e.cli.ContainerRemove(context.WithoutCancel(ctx), resp.ID, dcontainer.RemoveOptions{Force: true})
		return dcontainer.CreateResponse{}, err
	}
	return resp, nil
}

// engineConfig turns a validated Spec into the engine's configuration.
func engineConfig(spec ctrspec.Spec) (*dcontainer.Config, *dcontainer.HostConfig, *network.NetworkingConfig) {
	cfg := &dcontainer.Config{
		Image:        spec.Image,
		Labels:       maps0(spec.Labels),
		ExposedPorts: nat.PortSet{},
	}
	for _, k := range sortedKeys(spec.Env) {
		cfg.Env = append(cfg.Env, k+"="+spec.Env[k])
	}
	if spec.Cmd != nil {
		cfg.Cmd = append([]string(nil), spec.Cmd...)
	}
	hc := &dcontainer.HostConfig{PortBindings: nat.PortMap{}}
	for _, p := range spec.Ports {
		b, _ := ctrspec.ParsePort(p) // validated
		port := nat.Port(strconv.Itoa(int(b.ContainerPort)) + "/" + b.Proto)
		cfg.ExposedPorts[port] = struct{}{}
		hp := ""
		if b.HostPort != 0 {
			hp = strconv.Itoa(int(b.HostPort))
		}
		hc.PortBindings[port] = append(hc.PortBindings[port], nat.PortBinding{HostIP: b.HostIP, HostPort: hp})
	}
	for _, s := range spec.Volumes {
		v, _ := ctrspec.ParseVolume(s) // validated
		hc.Binds = append(hc.Binds, v.String())
	}
	name, n, _ := ctrspec.ParseRestart(spec.Restart) // validated
	hc.RestartPolicy = dcontainer.RestartPolicy{Name: dcontainer.RestartPolicyMode(name), MaximumRetryCount: n}
	nc := applyRuntime(spec.Runtime, cfg, hc)
	return cfg, hc, nc
}

// Replace puts the container spec declares in the place of old (taking a module): it checks the
// image is on the machine before touching old, then stops old, moves it aside under another
// name, creates and starts the new one, and removes old. It returns the new id and old's full
// configuration (the engine's inspect JSON, taken just before it was stopped) for the caller to
// record; nil when old was already gone.
//
// If the new container cannot be created or started, old is put back under its name and started
// again, and the error says so: a failed take leaves the service as it was.
func (e *Engine) Replace(ctx context.Context, old Observed, spec ctrspec.Spec) (id string, replaced json.RawMessage, err error) {
	if err := spec.Validate(); err != nil {
		return "", nil, err
	}
	if err := e.checkImage(ctx, spec); err != nil {
		return "", nil, err
	}
	ref := old.ID
	if ref == "" {
		ref = old.Name
	}
	c, raw, err := e.cli.ContainerInspectWithRaw(ctx, ref, false)
	if cerrdefs.IsNotFound(err) {
		e.log.Info("container: the container to replace is already gone; creating", "container", spec.Name, "old", ref)
		id, err := e.createAndStart(ctx, spec)
		return id, nil, err
	}
	if err != nil {
		return "", nil, e.wrap("inspect container "+ref+" to replace", err)
	}
	oldName := strings.TrimPrefix(c.Name, "/")
	wasRunning := c.State != nil && c.State.Running
	timeout := int(e.stopTimeout / time.Second)
	if err := e.cli.ContainerStop(ctx, c.ID, dcontainer.StopOptions{Timeout: &timeout}); err != nil {
		return "", nil, e.wrap("stop container "+oldName+" to replace it", err)
	}
	aside := fmt.Sprintf("%s-replaced-%s", oldName, shortID(c.ID))
	if err := e.cli.ContainerRename(ctx, c.ID, aside); err != nil {
		err = e.wrap("rename container "+oldName+" aside to replace it", err)
		return "", nil, errors.Join(err, e.restore(ctx, c.ID, oldName, "", wasRunning))
	}
	id, err = e.createAndStart(ctx, spec)
	if err != nil {
		return "", nil, errors.Join(err, e.restore(ctx, c.ID, oldName, aside, wasRunning))
	}
	if rmErr := e.cli.ContainerRemove(context.WithoutCancel(ctx), c.ID, dcontainer.RemoveOptions{}); rmErr != nil {
		e.log.Warn("container: replaced, but the old container could not be removed",
			"container", spec.Name, "old", aside, "err", rmErr)
	}
	e.log.Info("container: replaced", "container", spec.Name, "old_id", shortID(c.ID), "id", shortID(id), "image", spec.Image)
	return id, json.RawMessage(raw), nil
}

// restore puts a container Replace moved aside back as it was.
func (e *Engine) restore(ctx context.Context, id, name, aside string, start bool) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	if aside != "" {
		if err := e.cli.ContainerRename(ctx, id, name); err != nil {
			errs = append(errs, e.wrap(fmt.Sprintf("restore container %s (left as %s)", name, aside), err))
		}
	}
	if start {
		if err := e.cli.ContainerStart(ctx, id, dcontainer.StartOptions{}); err != nil {
			errs = append(errs, e.wrap("restart container "+name+" after a failed replace", err))
		}
	}
	if len(errs) == 0 {
		e.log.Warn("container: replace failed; the old container is back", "container", name, "id", shortID(id))
	}
	return errors.Join(errs...)
}

// lookup returns the id of the container named exactly name, "" if there is none.
func (e *Engine) lookup(ctx context.Context, op, name string) (string, error) {
	c, err := e.cli.ContainerInspect(ctx, name)
	if cerrdefs.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", e.wrap(op+" "+name, err)
	}
	if c.ContainerJSONBase == nil || (strings.TrimPrefix(c.Name, "/") != name && c.ID != name) {
		return "", nil
	}
	return c.ID, nil
}

// Remove stops and removes the container named name (its named volumes stay). Removing a
// container that does not exist is not an error.
func (e *Engine) Remove(ctx context.Context, name string) error {
	id, err := e.lookup(ctx, "remove container", name)
	if err != nil || id == "" {
		return err
	}
	err = e.cli.ContainerRemove(ctx, id, dcontainer.RemoveOptions{Force: true})
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err == nil {
		e.log.Info("container: removed", "container", name, "id", shortID(id))
	}
	return e.wrap("remove container "+name, err)
}

// Start starts the existing container named name; starting a running one is not an error.
func (e *Engine) Start(ctx context.Context, name string) error {
	id, err := e.lookup(ctx, "start container", name)
	if err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("start container %s: no such container on the engine at %s", name, e.host)
	}
	return e.wrap("start container "+name, e.cli.ContainerStart(ctx, id, dcontainer.StartOptions{}))
}

// Published lists every port published by every running container on the machine, meshd's or
// not, sorted by host port.
func (e *Engine) Published(ctx context.Context) ([]Published, error) {
	cs, err := e.cli.ContainerList(ctx, dcontainer.ListOptions{})
	if err != nil {
		return nil, e.wrap("list containers", err)
	}
	var out []Published
	for _, c := range cs {
		name := containerName(c.Names, c.ID)
		for _, p := range c.Ports {
			if p.PublicPort == 0 {
				continue // exposed, not published
			}
			out = append(out, Published{
				Container: name, ContainerID: c.ID, Module: c.Labels[ctrspec.LabelModule],
				HostIP: p.IP, HostPort: p.PublicPort, ContainerPort: p.PrivatePort, Proto: p.Type,
			})
		}
	}
	sortPublished(out)
	return out, nil
}

// containerName picks the container's own name out of the list the engine gives (which also
// holds link aliases such as /other/alias).
func containerName(names []string, id string) string {
	for _, n := range names {
		n = strings.TrimPrefix(n, "/")
		if !strings.Contains(n, "/") {
			return n
		}
	}
	return shortID(id)
}

// Prepare creates the container spec declares under the name as (a staging name: the declared
// one may be held by the container it will replace) without starting it, and returns its id.
// The image must be on the machine (ErrImageMissing otherwise); nothing else is touched. A take
// prepares first, so that a missing image or a refused configuration stops it before the found
// container is touched.
func (e *Engine) Prepare(ctx context.Context, spec ctrspec.Spec, as string) (string, error) {
	if err := spec.Validate(); err != nil {
		return "", err
	}
	if err := e.checkImage(ctx, spec); err != nil {
		return "", err
	}
	resp, err := e.create(ctx, spec, as)
	if err != nil {
		if cerrdefs.IsConflict(err) {
			return "", fmt.Errorf("prepare container %s as %s: the name is in use (engine %s): %w", spec.Name, as, e.host, err)
		}
		if cerrdefs.IsNotFound(err) {
			return "", &ImageMissingError{Image: spec.Image, Container: spec.Name, Host: e.host}
		}
		return "", e.wrap(fmt.Sprintf("prepare container %s as %s", spec.Name, as), err)
	}
	e.log.Info("container: prepared, not started", "container", spec.Name, "as", as, "id", shortID(resp.ID), "image", spec.Image)
	return resp.ID, nil
}

// Stop stops the container ref (an id or an exact name), giving it the engine's stop timeout;
// stopping a stopped one is not an error.
func (e *Engine) Stop(ctx context.Context, ref string) error {
	timeout := int(e.stopTimeout / time.Second)
	return e.wrap("stop container "+ref, e.cli.ContainerStop(ctx, ref, dcontainer.StopOptions{Timeout: &timeout}))
}

// Rename gives the container ref (an id or an exact name) the name to.
func (e *Engine) Rename(ctx context.Context, ref, to string) error {
	return e.wrap(fmt.Sprintf("rename container %s to %s", ref, to), e.cli.ContainerRename(ctx, ref, to))
}

// SetRestart gives the container ref (an id or an exact name) the restart policy restart ("no",
// "always", "unless-stopped", "on-failure[:N]"). A take sets "no" on the found container it keeps
// aside, so that a daemon restart or a reboot does not start it beside its replacement.
func (e *Engine) SetRestart(ctx context.Context, ref, restart string) error {
	name, n, err := ctrspec.ParseRestart(restart)
	if err != nil {
		return fmt.Errorf("restart policy of container %s: %q: %w", ref, restart, err)
	}
	_, err = e.cli.ContainerUpdate(ctx, ref, dcontainer.UpdateConfig{
		RestartPolicy: dcontainer.RestartPolicy{Name: dcontainer.RestartPolicyMode(name), MaximumRetryCount: n}})
	return e.wrap(fmt.Sprintf("set the restart policy of container %s to %s", ref, name), err)
}

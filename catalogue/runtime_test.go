package catalogue

import (
	"strings"
	"testing"
)

// A manifest says what Compose files and `docker run` set on a long-running service, and reads
// back as the same Runtime a found container is reconstructed into.
func TestParseContainerRuntime(t *testing.T) {
	src := `name: api
containers:
  - name: api
    image: lab/echo:1
    entrypoint: [/labsvc]
    working_dir: /work
    user: "65534"
    networks:
      - {name: appnet, aliases: [api], ipv4_address: 10.9.0.5}
    cap_add: [NET_ADMIN]
    cap_drop: [MKNOD]
    memory: 64m
    cpus: 0.5
    pids_limit: 100
    ulimits: ["nofile=1024:2048"]
    healthcheck: {test: [CMD-SHELL, /labsvc health], interval: 5s, retries: 3}
    logging: {driver: json-file, options: {max-size: 1m}}
    extra_hosts: ["db:10.1.2.3"]
    dns: [10.1.2.53]
    stop_signal: SIGINT
    stop_timeout: 3
    tmpfs: [/run]
    read_only: true
    init: true
    security_opt: [no-new-privileges]
    volumes: ["apidata:/var/lib/api"]
`
	m, err := Parse("api.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	c := m.Containers[0]
	if c.User != "65534" || c.CPUs != "0.5" || c.Memory != "64m" || len(c.Networks) != 1 || c.Networks[0].Aliases[0] != "api" ||
		c.Healthcheck == nil || c.Healthcheck.Retries != 3 || c.StopTimeout == nil || *c.StopTimeout != 3 || !c.Init ||
		c.Logging.Options["max-size"] != "1m" {
		t.Errorf("parsed %+v", c.Runtime)
	}
	r, err := m.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	if reaches := r.Reaches(); len(reaches) != 0 {
		t.Errorf("a named volume reaches the machine: %v", reaches)
	}
}

// Each bad Runtime value is refused naming its field and line.
func TestParseContainerRuntimeRefuses(t *testing.T) {
	for _, c := range []struct{ line, field, want string }{
		{"cap_add: [net admin]", "containers[0].cap_add[0]", "capability"},
		{"memory: lots", "containers[0].memory", "size"},
		{"networks: [{name: appnet, ipv4_address: fd00::1}]", "containers[0].networks[0].ipv4_address", "IPv4"},
		{"network_mode: overlay", "containers[0].network_mode", "bridge, host or none"},
		{"healthcheck: {test: [CMD]}", "containers[0].healthcheck.test", "CMD"},
		{"healthcheck: {test: [NONE], every: 5s}", "containers[0].healthcheck.every", "unknown field"},
		{"ulimits: [nofile=2048:1024]", "containers[0].ulimits[0]", "above the hard"},
		{"devices: [dev/null]", "containers[0].devices[0]", "/dev/host"},
		{"pid: container", "containers[0].pid", "host"},
	} {
		src := "name: api\ncontainers:\n  - name: api\n    image: i\n    " + c.line + "\n"
		_, err := Parse("api.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), c.want) ||
			!strings.Contains(err.Error(), "api.yaml:5") {
			t.Errorf("%s: %v, want %s at api.yaml:5 saying %q", c.line, err, c.field, c.want)
		}
	}
}

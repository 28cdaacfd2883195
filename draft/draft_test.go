package draft

import (
	"os"
	"slices"
	"strings"
	"testing"

	"meshd/catalogue"
	"meshd/container"
	"meshd/ctrspec"
	"meshd/fsm"
	"meshd/netfilter/reach"
	"meshd/report"
)

// firewall answers for the found firewall in these tests: by host port, else from anywhere.
type firewall map[uint16]reach.Answer

func (f firewall) Reach(p reach.Port) reach.Answer {
	if a, ok := f[p.HostPort]; ok {
		a.Port = p
		return a
	}
	return reach.Answer{Port: p, From: []string{reach.Anywhere}}
}

// open is a machine whose firewall lets anywhere reach every published port.
var open = firewall{}

// found reads testdata/found-api.json: `docker inspect` of a container made with `docker
// create --network draftfix-net --network-alias api --cap-add NET_ADMIN --user 65534:65534
// --memory 64m --health-cmd ... -e API_TOKEN=s3cret -p 8081:8080 -p 127.0.0.1:9091:9090/udp -v
// /srv/api:/data:ro -v apidata:/var/lib/api --label com.docker.compose.project=shop ...`, its
// reference taken to resolve to the image it runs.
func found(t *testing.T) (container.Observed, Container) {
	t.Helper()
	raw, err := os.ReadFile("testdata/found-api.json")
	if err != nil {
		t.Fatal(err)
	}
	o, err := container.FromInspect(raw)
	if err != nil {
		t.Fatal(err)
	}
	return o, Container{Spec: o.Spec, ImageID: o.ImageID, RefImageID: o.ImageID, Labels: o.Labels}
}

// specsOf parses a drafted manifest with the catalogue and makes each container's Spec as the
// host does, without meshd's labels.
func specsOf(t *testing.T, m Module) []ctrspec.Spec {
	t.Helper()
	parsed, err := catalogue.Parse(m.File, m.Manifest)
	if err != nil {
		t.Fatalf("the catalogue refuses the draft:\n%s\n%v", m.Manifest, err)
	}
	r, err := parsed.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []ctrspec.Spec
	for i := range r.Containers {
		s := report.SpecOf(fsm.Resource{Module: m.Name, Kind: fsm.KindContainer, Container: &r.Containers[i]})
		for k := range ctrspec.ManagedLabels(m.Name) {
			delete(s.Labels, k)
		}
		out = append(out, s)
	}
	return out
}

// A found container drafted, parsed back by the catalogue and made a Spec is the container:
// Diff finds nothing, every runtime field is the one it was found with, and the host port is a
// setting with an opening for the port published beyond loopback.
func TestUnitDraftRoundTripsTheFoundContainer(t *testing.T) {
	o, c := found(t)
	res := Draft(Input{Node: "hub", Containers: []Container{c}, Firewall: open})
	if len(res.Refused) > 0 || len(res.Modules) != 1 {
		t.Fatalf("draft = %d modules, refused %v", len(res.Modules), res.Refused)
	}
	m := res.Modules[0]
	if m.Name != "shop" {
		t.Errorf("module %q, want the Compose project shop", m.Name)
	}
	specs := specsOf(t, m)
	if len(specs) != 1 {
		t.Fatalf("%d containers drafted", len(specs))
	}
	got := specs[0]
	if d := container.Diff(got, o); len(d) > 0 {
		t.Errorf("the drafted container differs from the found one:\n%s\nmanifest:\n%s", strings.Join(d, "\n"), m.Manifest)
	}
	if !slices.Equal(got.Ports, o.Spec.Ports) || !slices.Equal(got.Volumes, o.Spec.Volumes) || got.Restart != o.Spec.Restart {
		t.Errorf("ports %q volumes %q restart %q, want %q %q %q", got.Ports, got.Volumes, got.Restart, o.Spec.Ports, o.Spec.Volumes, o.Spec.Restart)
	}
	if changes := ctrspec.RuntimeChanges(o.Spec, got); len(changes) > 0 {
		t.Errorf("runtime changes %v", changes)
	}
	if got.Env["API_TOKEN"] != "s3cret" || got.User != "65534:65534" || got.Networks[0].Aliases[0] != "api" {
		t.Errorf("env, user or alias lost: %+v", got)
	}
	if m.Settings["draftfix_api_port_8080"] != "8081" || !slices.Equal(m.Openings, []string{"${draftfix_api_port_8080}/tcp forwarded from anywhere"}) {
		t.Errorf("settings %v openings %q: want 8081 a setting, opened; the loopback udp port not opened", m.Settings, m.Openings)
	}
	if len(m.Privileged) != 2 {
		t.Errorf("privileged because %q, want NET_ADMIN and the mount of /srv/api", m.Privileged)
	}
}

// The preview names env variables and never their values (the manifest keeps the values), and
// what was left out.
func TestUnitPreviewShowsEnvNamesNotValues(t *testing.T) {
	_, c := found(t)
	res := Draft(Input{Node: "hub", Containers: []Container{c}, LeftOut: []string{"container web is meshd's (module web)"}, Firewall: open})
	text := Text(res, "drafts")
	if !strings.Contains(text, "env: API_TOKEN, MODE") || strings.Contains(text, "s3cret") ||
		!strings.Contains(text, "left out: container web is meshd's (module web)") {
		t.Errorf("preview:\n%s", text)
	}
	if !strings.Contains(string(res.Modules[0].Manifest), "s3cret") {
		t.Errorf("the manifest lost the env value")
	}
}

// What a manifest cannot reproduce refuses the draft, each thing named by node, container and
// field (an env variable by name, never its value).
func TestUnitDraftRefusesWhatItCannotReproduce(t *testing.T) {
	_, c := found(t)
	c.Spec.Unexpressed = []string{`HostConfig.IpcMode "host"`}
	c.RefImageID = "sha256:other"
	c.Spec.Env = map[string]string{"DSN": "postgres://${USER}@db"}
	c.Spec.Restart = "sometimes"
	c.Spec.Volumes = []string{"/srv/api:/data:z"}
	res := Draft(Input{Node: "hub", Containers: []Container{c}, Firewall: open})
	var got []string
	for _, r := range res.Refused {
		got = append(got, r.String())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{
		`node hub container draftfix-api: HostConfig.IpcMode: "host": a manifest cannot say it`,
		"node hub container draftfix-api: image: ctrx/probe:1 names sha256:other now; the container runs sha256:1da89c",
		"node hub container draftfix-api: env DSN: its value has ${...}",
		`node hub container draftfix-api: restart: "sometimes"`,
		`node hub container draftfix-api: volumes[0]: "/srv/api:/data:z": a manifest's volume takes ro or rw, not z`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("refusals lack %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "postgres") {
		t.Errorf("a refusal shows an env value:\n%s", all)
	}
	if len(res.Modules) != 1 || len(res.Modules[0].Containers) != 0 {
		t.Errorf("the refused container is drafted anyway: %+v", res.Modules)
	}
}

// Containers of one Compose project are one module; another is a module of its own; named files
// go to the node's files module with their mode and owner.
func TestUnitDraftGroupsByComposeProject(t *testing.T) {
	_, a := found(t)
	b := a
	b.Spec.Name, b.Spec.Ports = "draftfix-web", []string{"8082:80"}
	solo := Container{Spec: ctrspec.Spec{Name: "Metrics_1", Image: "metrics:1"}, ImageID: "sha256:m", RefImageID: "sha256:m"}
	f := File{Path: "/etc/predecessor/sync.conf", Content: []byte("generation 4\n"), Mode: 0o640, UID: 0, GID: 4}
	res := Draft(Input{Node: "hub", Containers: []Container{solo, b, a}, Files: []File{f}, Firewall: open})
	if len(res.Refused) > 0 {
		t.Fatal(res.Refused)
	}
	var names []string
	for _, m := range res.Modules {
		names = append(names, m.Name)
		specsOf(t, m)
	}
	if want := []string{"hub-files", "metrics-1", "shop"}; !slices.Equal(names, want) {
		t.Fatalf("modules %q, want %q", names, want)
	}
	if cs := res.Modules[2].Containers; len(cs) != 2 || cs[0].Name != "draftfix-api" || cs[1].Name != "draftfix-web" {
		t.Errorf("shop holds %+v", cs)
	}
	if fs := res.Modules[0].Files; len(fs) != 1 || fs[0].Mode != "0640" || fs[0].Owner != "0:4" {
		t.Errorf("files %+v", fs)
	}
	if len(res.Modules[1].Privileged) != 0 || strings.Contains(string(res.Modules[1].Manifest), "privileged") {
		t.Errorf("a plain container's module is privileged:\n%s", res.Modules[1].Manifest)
	}
}

// A drafted module never takes the name of one the catalogue has: adding it would replace that
// module. It is named NAME-2 (or the next number free) instead.
func TestUnitDraftKeepsClearOfTheCatalogue(t *testing.T) {
	_, c := found(t)
	res := Draft(Input{Node: "hub", Containers: []Container{c}, Catalogue: []string{"store", "shop", "shop-2"}, Firewall: open})
	if len(res.Refused) > 0 || len(res.Modules) != 1 {
		t.Fatalf("draft: %+v", res)
	}
	if m := res.Modules[0]; m.Name != "shop-3" || m.File != "shop-3.yaml" || !strings.Contains(string(m.Manifest), "\nname: shop-3\n") {
		t.Errorf("module %s in %s, want shop-3:\n%s", m.Name, m.File, m.Manifest)
	}
}

// A restart policy with a retry limit (`docker run --restart on-failure:3`, Compose's
// `restart: on-failure:3`) refused the draft; it is drafted as it is, and the catalogue reads it
// back the same.
func TestUnitDraftKeepsARestartRetryLimit(t *testing.T) {
	_, c := found(t)
	c.Spec.Restart = "on-failure:3"
	res := Draft(Input{Node: "hub", Containers: []Container{c}, Firewall: open})
	if len(res.Refused) > 0 || len(res.Modules) != 1 {
		t.Fatalf("refused: %v", res.Refused)
	}
	if !strings.Contains(string(res.Modules[0].Manifest), "restart: on-failure:3") {
		t.Errorf("manifest:\n%s", res.Modules[0].Manifest)
	}
	if specs := specsOf(t, res.Modules[0]); len(specs) != 1 || specs[0].Restart != "on-failure:3" {
		t.Errorf("read back: %+v", specs)
	}
}

// Issue 38: an opening says whom the found firewall lets in, never more. A port the firewall
// keeps to the LAN is opened from the LAN's prefixes, one opening each; a port nobody outside
// reaches gets no opening and the preview names the rule that closes it; a port whose reach
// depends on a rule that cannot be read refuses the draft, naming the rule.
func TestUnitDraftOpensOnlyWhatTheFoundFirewallLetsIn(t *testing.T) {
	_, c := found(t)
	metrics := Container{Spec: ctrspec.Spec{Name: "metrics", Image: "metrics:1", Ports: []string{"9090:9090", "9100:9100"}},
		ImageID: "sha256:m", RefImageID: "sha256:m"}
	drop := "iptables-nft filter: -A DOCKER-USER -o docker0 -m conntrack --ctstate NEW -j DROP"
	fw := firewall{
		8081: {From: []string{"10.0.0.0/8", "192.168.0.0/16"}},
		9090: {ClosedBy: []string{drop}},
	}
	res := Draft(Input{Node: "hub", Containers: []Container{c, metrics}, Firewall: fw})
	if len(res.Refused) > 0 || len(res.Modules) != 2 {
		t.Fatalf("draft: %+v", res)
	}
	m, shop := res.Modules[0], res.Modules[1]
	if want := []string{"${metrics_port_9100}/tcp forwarded from anywhere"}; !slices.Equal(m.Openings, want) {
		t.Errorf("metrics openings %q, want %q", m.Openings, want)
	}
	if len(m.Closed) != 1 || !strings.Contains(m.Closed[0], "${metrics_port_9090}/tcp (host port 9090/tcp): closed by the found firewall ("+drop+")") {
		t.Errorf("metrics closed %q", m.Closed)
	}
	if want := []string{"${draftfix_api_port_8080}/tcp forwarded from 10.0.0.0/8", "${draftfix_api_port_8080}/tcp forwarded from 192.168.0.0/16"}; !slices.Equal(shop.Openings, want) {
		t.Errorf("shop openings %q, want %q", shop.Openings, want)
	}
	for _, mod := range res.Modules {
		specsOf(t, mod) // the catalogue reads each back
	}
	parsed, err := catalogue.Parse(m.File, m.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := parsed.Resolve(nil); err != nil || len(r.Openings) != 1 || r.Openings[0].Port != 9100 {
		t.Errorf("metrics resolves to openings %+v (%v), want 9100's alone:\n%s", r.Openings, err, m.Manifest)
	}
	if text := Text(res, "drafts"); !strings.Contains(text, "  no opening: ${metrics_port_9090}/tcp (host port 9090/tcp): closed by the found firewall ("+drop+")") {
		t.Errorf("preview:\n%s", text)
	}

	rule := "iptables-nft filter: -A DOCKER-USER -m set --match-set admins src -j RETURN: match --match-set admins is not understood"
	res = Draft(Input{Node: "hub", Containers: []Container{metrics}, Firewall: firewall{9090: {Refused: rule}}})
	if len(res.Refused) != 1 || !strings.Contains(res.Refused[0].String(), `node hub container metrics: ports[0]: "9090:9090": who outside reaches host port 9090/tcp is not known: the found firewall's rule `+rule) {
		t.Errorf("refused %v", res.Refused)
	}
	if res = Draft(Input{Node: "hub", Containers: []Container{metrics}}); len(res.Refused) != 2 {
		t.Errorf("no firewall read, refused %v; want both ports refused", res.Refused)
	}
}

// A found container whose name a module of the catalogue declares (not assigned on this node) is
// left out, naming the module and how to hold it: a manifest beside that module's would be
// refused by `module add` (a new-user run drafted webapp-2 and could not add it).
func TestUnitDraftLeavesOutAContainerTheCatalogueDeclares(t *testing.T) {
	_, c := found(t)
	res := Draft(Input{Node: "hub", Containers: []Container{c}, Firewall: open,
		Catalogue: []string{"shop"}, Declared: map[string]string{c.Spec.Name: "shop"}})
	if len(res.Refused) > 0 || len(res.Modules) != 0 {
		t.Fatalf("drafted %+v, refused %v: want the container left out", res.Modules, res.Refused)
	}
	want := "container " + c.Spec.Name + ": module shop of the catalogue declares a container of this name; assign it here to hold this one (meshd module assign hub shop)"
	if len(res.LeftOut) != 1 || !strings.HasPrefix(res.LeftOut[0], want) {
		t.Errorf("left out %q, want %q", res.LeftOut, want)
	}
	if text := Text(res, "drafts"); !strings.Contains(text, "left out: "+want) {
		t.Errorf("preview:\n%s", text)
	}
}

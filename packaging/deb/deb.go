package deb

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"

	"meshd/packaging"
)

// The maintainer scripts and the copyright file, as the package ships them.
var (
	//go:embed debian/postinst
	postinst string
	//go:embed debian/prerm
	prerm string
	//go:embed debian/postrm
	postrm string
	//go:embed debian/copyright
	copyright string
	//go:embed debian/lintian-overrides
	lintianOverrides string
)

// Where the package puts things.
const (
	BinPath    = "/usr/bin/meshd"
	ConfigPath = "/etc/meshd/meshd.yaml"
	UnitPath   = "/lib/systemd/system/meshd.service"
	// DocDir holds the docs in the source's layout (README.md, docs/runbook.md, docs/img/...), so
	// that each reference one makes to another resolves on an installed machine.
	DocDir      = "/usr/share/doc/meshd"
	RunbookPath = DocDir + "/docs/runbook.md"
	// AlertsDir holds docs/alerts.yml, for Prometheus's rule_files, and its promtool tests: not
	// the doc dir, which minimal images drop (dpkg path-exclude); DocDir's docs/alerts*.yml are
	// links to them.
	AlertsDir  = "/usr/share/meshd"
	AlertsPath = AlertsDir + "/alerts.yml"
	Maintainer = "meshd maintainers <maintainers@users.noreply.a-seed-be45f6d7.example>"
)

// Depends is the package's Depends: the binary is static; procps holds /bin/kill, which the
// unit's ExecReload runs. What a node uses besides (a container engine, wireguard-tools for the
// predecessor's wg-quick) is Suggests: machines in use have their own engine (Debian's docker.io
// or Docker's docker-ce), which a Recommends would pull in beside it.
var (
	Depends  = []string{"procps"}
	Suggests = []string{"docker.io | docker-ce", "wireguard-tools"}
)

// Options is what Build packs.
type Options struct {
	// Binary is the static meshd to ship; it must say Version in `meshd version --json`.
	Binary string
	// Repo is the repository's root: README.md, CONTRIBUTING.md and docs/ are shipped from it.
	Repo string
	// Version is the package's version (GitVersion), and Date the commit's time: every file's
	// time in the package and the changelog's date, so a build is reproducible.
	Version string
	Date    time.Time
	// OutDir is where meshd_VERSION_amd64.deb is written.
	OutDir string
}

// FileName is the package's file name for version v.
func FileName(v string) string { return "meshd_" + v + "_amd64.deb" }

// Build writes the package into o.OutDir and returns its path.
func Build(o Options) (string, error) {
	if err := checkBinary(o.Binary, o.Version); err != nil {
		return "", err
	}
	stage, err := os.MkdirTemp("", "meshpkg-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)

	var contents files.Contents
	add := func(dst, src, typ string, mode os.FileMode) {
		contents = append(contents, &files.Content{Source: src, Destination: dst, Type: typ,
			FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode, MTime: o.Date}})
	}
	write := func(dst string, data []byte, typ string, mode os.FileMode) error {
		src := filepath.Join(stage, "files", dst)
		if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(src, data, 0o644); err != nil {
			return err
		}
		add(dst, src, typ, mode)
		return nil
	}

	add(BinPath, o.Binary, "", 0o755)
	if err := write(UnitPath, []byte(packaging.UnitFor(BinPath, ConfigPath)), "", 0o644); err != nil {
		return "", err
	}
	if err := write(ConfigPath, []byte(packaging.Config), files.TypeConfig, 0o644); err != nil {
		return "", err
	}
	// Completions, from the binary's own command tree.
	for shell, dst := range map[string]string{
		"bash": "/usr/share/bash-completion/completions/meshd",
		"zsh":  "/usr/share/zsh/vendor-completions/_meshd",
		"fish": "/usr/share/fish/vendor_completions.d/meshd.fish",
	} {
		out, err := run(o.Binary, o.Date, "completion", shell)
		if err != nil {
			return "", err
		}
		if err := write(dst, out, "", 0o644); err != nil {
			return "", err
		}
	}
	// Man pages, gzipped at the best compression with no name or time (as lintian wants).
	manDir := filepath.Join(stage, "man")
	if _, err := run(o.Binary, o.Date, "docs", "man", "--out", manDir); err != nil {
		return "", err
	}
	pages, err := filepath.Glob(filepath.Join(manDir, "*.1"))
	if err != nil || len(pages) == 0 {
		return "", fmt.Errorf("meshd docs man wrote no pages into %s", manDir)
	}
	sort.Strings(pages)
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		if err := write("/usr/share/man/man1/"+filepath.Base(p)+".gz", gz(b), "", 0o644); err != nil {
			return "", err
		}
	}
	// The docs, as the source lays them out. A native package's changelog is changelog.gz
	// (lintian: wrong-name-for-changelog-of-native-package for changelog.Debian.gz).
	docs, err := shippedDocs(o.Repo)
	if err != nil {
		return "", err
	}
	for _, rel := range docs {
		add(DocDir+"/"+rel, filepath.Join(o.Repo, rel), "", 0o644)
	}
	for _, name := range alertFiles {
		add(AlertsDir+"/"+name, filepath.Join(o.Repo, "docs", name), "", 0o644)
		contents = append(contents, &files.Content{Source: "../../../meshd/" + name, Destination: DocDir + "/docs/" + name,
			Type: files.TypeSymlink, FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", MTime: o.Date}})
	}
	if err := write(DocDir+"/copyright", []byte(copyright), "", 0o644); err != nil {
		return "", err
	}
	if err := write("/usr/share/lintian/overrides/meshd", []byte(lintianOverrides), "", 0o644); err != nil {
		return "", err
	}
	if err := write(DocDir+"/changelog.gz", gz([]byte(changelog(o.Version, o.Date))), "", 0o644); err != nil {
		return "", err
	}

	scripts := map[string]string{"postinst": postinst, "prerm": prerm, "postrm": postrm}
	paths := map[string]string{}
	for name, text := range scripts {
		p := filepath.Join(stage, "scripts", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, []byte(text), 0o755); err != nil {
			return "", err
		}
		paths[name] = p
	}

	info := &nfpm.Info{
		Name:          "meshd",
		Arch:          "amd64",
		Platform:      "linux",
		Version:       o.Version,
		VersionSchema: "none",
		Section:       "net",
		Priority:      "optional",
		Maintainer:    Maintainer,
		Description: "node agent of a mesh that takes a fleet over from its predecessor\n" +
			"meshd takes a fleet of machines over from a predecessor mesh, machine by\n" +
			"machine and module by module, while the machines keep serving. Every\n" +
			"machine runs the agent (meshd.service); the control-node leads a Raft group\n" +
			"holding the record. After installing, make the machine a node with\n" +
			"meshd genesis or meshd join, then start the agent.",
		License: "meshd-unlicensed",
		MTime:   o.Date,
		Overridables: nfpm.Overridables{
			Depends:  Depends,
			Suggests: Suggests,
			Contents: contents,
			Umask:    0o022,
			Scripts:  nfpm.Scripts{PostInstall: paths["postinst"], PreRemove: paths["prerm"], PostRemove: paths["postrm"]},
			Deb:      nfpm.Deb{Compression: "xz"},
		},
	}
	pkgr, err := nfpm.Get("deb")
	if err != nil {
		return "", err
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return "", fmt.Errorf("package contents: %w", err)
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(o.OutDir, FileName(o.Version))
	f, err := os.Create(out + ".tmp")
	if err != nil {
		return "", err
	}
	defer os.Remove(out + ".tmp")
	if err := pkgr.Package(info, f); err != nil {
		f.Close()
		return "", fmt.Errorf("package %s: %w", out, err)
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return out, os.Rename(out+".tmp", out)
}

// checkBinary says whether bin is a meshd stamped with version v (a stale bin/meshd is not).
func checkBinary(bin, v string) error {
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		return fmt.Errorf("%s version --json: %w", bin, err)
	}
	var got struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		return fmt.Errorf("%s version --json: %w", bin, err)
	}
	if got.Version != v {
		return fmt.Errorf("%s says version %q, the package would be %q: build it again (make build)", bin, got.Version, v)
	}
	return nil
}

// run runs meshd with args, with the build's date as SOURCE_DATE_EPOCH (the man pages' date) and
// without the caller's MESHD_* variables, and returns its standard output.
func run(bin string, date time.Time, args ...string) ([]byte, error) {
	cmd := exec.Command(bin, args...)
	env := []string{"SOURCE_DATE_EPOCH=" + strconv.FormatInt(date.Unix(), 10)}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "MESHD_") && !strings.HasPrefix(e, "SOURCE_DATE_EPOCH=") {
			env = append(env, e)
		}
	}
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("meshd %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// gz is b gzipped at the best compression, with no file name or time in its header.
func gz(b []byte) []byte {
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

// changelog is the package's changelog: one entry, for this build.
func changelog(v string, date time.Time) string {
	return fmt.Sprintf(`meshd (%s) unstable; urgency=medium

  * Built from the meshd repository (its commits counted in the version).

 -- %s  %s
`, v, Maintainer, date.UTC().Format("Mon, 02 Jan 2006 15:04:05 -0700"))
}

// alertFiles are the alert rules and their promtool tests (whose rule_files name alerts.yml
// beside them), shipped in AlertsDir.
var alertFiles = []string{"alerts.yml", "alerts_test.yml", "alerts_week_test.yml"}

// shippedDocs is what DocDir holds of the repository at repo, by its path there: the README, the
// contributing guide and every page and image of docs/ (the README and the runbook name them).
func shippedDocs(repo string) ([]string, error) {
	docs := []string{"README.md", "CONTRIBUTING.md"}
	for _, pattern := range []string{"docs/*.md", "docs/img/*.png"} {
		found, err := filepath.Glob(filepath.Join(repo, pattern))
		if err != nil || len(found) == 0 {
			return nil, fmt.Errorf("no %s in %s: %v", pattern, repo, err)
		}
		for _, f := range found {
			rel, err := filepath.Rel(repo, f)
			if err != nil {
				return nil, err
			}
			docs = append(docs, filepath.ToSlash(rel))
		}
	}
	return docs, nil
}

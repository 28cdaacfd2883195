package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A config file's problems are each named by file, line and key, all of them at once.
func TestLoadConfigFileNamesLineAndKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meshd.yaml")
	if err := os.WriteFile(path, []byte(`# a comment
data_dir: /var/lib/meshd
log_level: loud
reconcile_interval: often
metrics:
  - 127.0.0.1
colour: blue
socket: run/meshd.sock
`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := LoadConfigFile(path)
	errs, ok := err.(ConfigErrors)
	if !ok {
		t.Fatalf("LoadConfigFile: %v (%T); want ConfigErrors", err, err)
	}
	want := []string{
		path + ":3: log_level: ",
		path + ":4: reconcile_interval: want a duration",
		path + ":6: metrics: metrics address 127.0.0.1",
		path + ":7: colour: unknown key (known: data_dir, socket,",
		path + ":8: socket: \"run/meshd.sock\" is not an absolute path",
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(errs), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i].Error(), w) {
			t.Errorf("problem %d: %q; want it to begin %q", i, errs[i].Error(), w)
		}
	}

	good := filepath.Join(t.TempDir(), "good.yaml")
	if err := os.WriteFile(good, []byte("reconcile_interval: 30s\nmetrics: [\"127.0.0.1:9470\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, set, err := LoadConfigFile(good)
	if err != nil || cfg.ReconcileInterval != 30*time.Second || len(cfg.Metrics) != 1 || !set["metrics"] || set["data_dir"] {
		t.Errorf("good file: %+v set %v err %v", cfg, set, err)
	}
}

// The shipped example config (packaging/meshd.yaml) is valid and documents every key the agent
// reads, so a key added to Config without a word in the example fails here.
func TestExampleConfigDocumentsEveryKey(t *testing.T) {
	path := "../packaging/meshd.yaml"
	if _, _, err := LoadConfigFile(path); err != nil {
		t.Fatalf("the example config: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ConfigKeys() {
		if !strings.Contains(string(b), "# "+k+": ") {
			t.Errorf("%s does not document %s (want a comment line \"# %s: what it is\")", path, k, k)
		}
	}
}

package pass

import (
	"strings"
	"testing"
)

// meshd's own paths are refused to a module, but for the module's own data directory; a mount
// above one of them is refused too.
func TestOwnRefusesMeshdsPathsButAModulesOwnData(t *testing.T) {
	o := Own{Data: "/srv/meshd", Others: []string{"/srv/keys/seal.key", "/run/m"}}
	for _, c := range []struct {
		what, module, path string
		refused            bool
	}{
		{"a mount of", "store", "/srv/meshd/store", false},
		{"a file at", "registry", "/srv/meshd/registry/config.yml", false},
		{"a mount of", "store", "/srv/meshd", true},
		{"a mount of", "store", "/srv/meshd/registry", true},
		{"a mount of", "raft", "/srv/meshd/raft", true},
		{"a file at", "evil", "/srv/meshd/pki/ca.key.sealed", true},
		{"a file at", "evil", "/srv/keys/seal.key", true},
		{"a mount of", "evil", "/srv/keys", true},
		{"a mount of", "evil", "/srv", true},
		{"a file at", "evil", "/run/m/meshd.sock", true},
		{"a file at", "app", "/etc/app/app.conf", false},
		{"a mount of", "app", "/srv/app", false},
	} {
		err := o.Refuse(c.what, c.module, c.path)
		if (err != nil) != c.refused || (err != nil && !strings.Contains(err.Error(), "meshd's own")) {
			t.Errorf("%s %s by %s: %v, want refused %v", c.what, c.path, c.module, err, c.refused)
		}
	}
}

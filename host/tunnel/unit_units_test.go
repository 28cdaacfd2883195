package tunnel

import (
	"os"
	"path/filepath"
	"testing"

	"meshd/host/hosttest"
	"meshd/report"
)

// The report says what the found unit is: enabled before the takeover, masked after it (also on
// the passes after), disabled where someone removed the mask and left it unwanted.
func TestUnitTheReportSaysTheFoundUnitIsMasked(t *testing.T) {
	b := newTestBed(t)
	d := newDriver(Config{Root: b.root}, nil, nil)
	if got := d.foundUnit("wg0"); got != report.FoundUnitEnabled {
		t.Errorf("before the takeover: %q, want %q", got, report.FoundUnitEnabled)
	}
	h := b.host()
	for i := range 2 {
		rep := h.Reconcile(hosttest.Ctx(t), b.decl)
		if len(rep.Errors) > 0 {
			t.Fatalf("pass %d: %+v", i, rep.Errors)
		}
		if det := detailOf(t, rep); det.FoundUnit != report.FoundUnitMasked {
			t.Errorf("pass %d: the report's found unit %q, want %q", i, det.FoundUnit, report.FoundUnitMasked)
		}
	}
	if err := os.Remove(filepath.Join(b.root, "etc/systemd/system/wg-quick@wg0.service")); err != nil {
		t.Fatal(err)
	}
	if got := d.foundUnit("wg0"); got != report.FoundUnitDisabled {
		t.Errorf("unmasked by hand: %q, want %q", got, report.FoundUnitDisabled)
	}
	if got := d.foundUnit(""); got != "" {
		t.Errorf("nothing found: %q, want none", got)
	}
}

package report

import "testing"

// A module is pending until a report knows of it, in force once a pass has it as the record does
// with nothing of it failed or (taken) held, failed when one of its resources failed.
func TestUnitModuleOn(t *testing.T) {
	held := &Report{Assigned: []string{"web"}, Taken: []string{"web"}, Held: []HeldFile{{Path: "/etc/web/a.conf", Module: "web"}}}
	failed := &Report{Assigned: []string{"web"}, Errors: []ResourceError{{Resource: "file:/etc/web/a.conf", Module: "web", Reason: "read-only file system"}}}
	for _, tc := range []struct {
		name  string
		rep   *Report
		taken bool
		state string
		why   string
	}{
		{"no report", nil, false, Pending, "no report from the node yet"},
		{"a report from before the assign", &Report{Assigned: []string{"db"}}, false, Pending, "the node has not reported a pass with it assigned yet"},
		{"assigned", &Report{Assigned: []string{"web"}}, false, InForce, ""},
		{"assigned, a resource failed", failed, false, Failed, "file:/etc/web/a.conf: read-only file system"},
		{"taken, from before the take", &Report{Assigned: []string{"web"}}, true, Pending, "the node has not reported a pass with it taken yet"},
		{"taken, still held", held, true, Pending, "file /etc/web/a.conf still held"},
		{"taken and carried out", &Report{Assigned: []string{"web"}, Taken: []string{"web"}}, true, InForce, ""},
	} {
		state, why := ModuleOn(tc.rep, "web", tc.taken)
		if state != tc.state || why != tc.why {
			t.Errorf("%s: %s (%s), want %s (%s)", tc.name, state, why, tc.state, tc.why)
		}
	}
}

// A summary reads the same on every run: counts in the order of their names.
func TestCountsInASteadyOrder(t *testing.T) {
	got := Counts(map[string]int{Pending: 2, InForce: 5, Failed: 1})
	if want := "1 failed, 5 in force, 2 pending"; got != want {
		t.Fatalf("Counts = %q, want %q", got, want)
	}
	if got := Counts(nil); got != "" {
		t.Fatalf("Counts(nil) = %q, want empty", got)
	}
}

package containers

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"meshd/container"
	"meshd/ctrspec"
	"meshd/host/pass"
	"meshd/report"
)

// record is what the driver remembers of one container name.
type record struct {
	Module string    `json:"module"`
	State  string    `json:"state"`
	ID     string    `json:"id"`
	Image  string    `json:"image"`
	At     time.Time `json:"at"`
	// What was found at the name, kept from before anything happened to it.
	FoundID      string        `json:"found_id,omitempty"`
	FoundImage   string        `json:"found_image,omitempty"`
	FoundImageID string        `json:"found_image_id,omitempty"`
	FoundSpec    *ctrspec.Spec `json:"found_spec,omitempty"`
	// FoundSpecV is foundSpecRuntime for a FoundSpec that says the container's Runtime; 0 for
	// one recorded before a Spec could (whose empty Runtime says nothing of the container).
	FoundSpecV int             `json:"found_spec_v,omitempty"`
	FoundAt    time.Time       `json:"found_at,omitzero"`
	Original   json.RawMessage `json:"original,omitempty"`
	// Replaced is the configuration of the container a take replaced, as the engine gave it just
	// before it was stopped.
	Replaced   json.RawMessage `json:"replaced,omitempty"`
	ReplacedAt time.Time       `json:"replaced_at,omitzero"`
	// ReplacedID and Aside are the container a take replaced and the name it is kept under,
	// stopped (AsideName), until the operator removes it.
	ReplacedID string `json:"replaced_id,omitempty"`
	Aside      string `json:"aside,omitempty"`
	// AsideRestart is the restart policy the aside container had; it is kept with "no".
	AsideRestart string `json:"aside_restart,omitempty"`
	// Cutover is a take under way: committed before the found container is stopped, dropped
	// when the new one runs or the found one is back. A pass after a crash finishes it.
	Cutover *cutover `json:"cutover,omitempty"`
	// A cutover that failed and was put back is not tried again on every pass, for it stops the
	// found container each time: TakeFailures in a row for the same declaration and found
	// container (TakeFailedFor, takeKey), the last at TakeFailedAt, why in TakeFailed.
	TakeFailedFor string    `json:"take_failed_for,omitempty"`
	TakeFailures  int       `json:"take_failures,omitempty"`
	TakeFailedAt  time.Time `json:"take_failed_at,omitzero"`
	TakeFailed    string    `json:"take_failed,omitempty"`
}

// cutover is what a take in progress must remember to finish or to put back what was found.
type cutover struct {
	// OldID is the container being replaced; WasRunning whether it ran before the take stopped
	// it; Replaced its configuration just before.
	OldID      string          `json:"old_id"`
	WasRunning bool            `json:"was_running"`
	Replaced   json.RawMessage `json:"replaced,omitempty"`
	// Restart is its restart policy, set to "no" while it is kept aside (so a reboot does not
	// start it beside its replacement) and given back when it is put back.
	Restart string `json:"restart,omitempty"`
	// Aside is the name it is moved to; StagedID the new container, prepared under
	// stagedName.
	Aside    string `json:"aside"`
	StagedID string `json:"staged_id"`
}

// stagedName is the temporary name a take prepares the new container under while the found
// one holds the declared name.
func stagedName(name string) string { return name + ".meshd-new" }

// loadRecords reads the driver's records into records, by container name.
func loadRecords(recs *pass.Records, records map[string]*record) error {
	keys, err := recs.Keys()
	if err != nil {
		return err
	}
	for _, k := range keys {
		b, _, err := recs.Get(k)
		if err != nil {
			return err
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("container record %s: %w", k, err)
		}
		records[k] = &r
	}
	return nil
}

// foundSpecRuntime is the FoundSpecV of a found container's record that says its Runtime.
const foundSpecRuntime = 2

// foundSpecOf is what the record says the found container was, to compare with o: a record made
// before a Spec said a container's Runtime is read as having o's, so a held container is not
// reported changed by an upgrade of meshd.
func foundSpecOf(rec *record, o container.Observed) ctrspec.Spec {
	spec := *rec.FoundSpec
	if rec.FoundSpecV < foundSpecRuntime {
		spec.Runtime, spec.Unexpressed = o.Spec.Runtime, o.Spec.Unexpressed
	}
	return spec
}

// recordFound durably records a found container's configuration before anything else happens
// to it, as held.
func (p *driverPass) recordFound(name, module string, o container.Observed) (*record, error) {
	now := time.Now().UTC()
	spec := o.Spec
	rec := &record{Module: module, State: report.ContainerHeld, ID: o.ID, Image: o.ImageRef, At: now,
		FoundID: o.ID, FoundImage: o.ImageRef, FoundImageID: o.ImageID, FoundSpec: &spec, FoundSpecV: foundSpecRuntime,
		FoundAt: now, Original: o.Raw}
	if err := p.put(name, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

func (p *driverPass) put(name string, rec *record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := p.recs.Put(name, b); err != nil {
		return err
	}
	p.records[name] = rec
	p.out.Changes++
	return nil
}

func recordNames(records map[string]*record) []string {
	return slices.Sorted(maps.Keys(records))
}

// Original returns what the container driver recorded of a container it found at name:
// its configuration when found (the engine's inspect JSON) and, once a take replaced it, the
// configuration of the container replaced (taken just before it was stopped; nil if none).
func (d *Driver) Original(recs *pass.Records, name string) (original, replaced json.RawMessage, err error) {
	b, ok, err := recs.Get(name)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, nil, fmt.Errorf("no record of a container %s on this node", name)
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, nil, fmt.Errorf("container record %s: %w", name, err)
	}
	if len(rec.Original) == 0 && len(rec.Replaced) == 0 {
		return nil, nil, fmt.Errorf("container %s was created by the host; nothing was found there", name)
	}
	return rec.Original, rec.Replaced, nil
}

// ContainerFound returns what the container driver recorded of the container it found at name.
func (d *Driver) Found(recs *pass.Records, name string) (report.ContainerFound, error) {
	b, ok, err := recs.Get(name)
	if err != nil {
		return report.ContainerFound{}, err
	}
	if !ok {
		return report.ContainerFound{}, fmt.Errorf("no record of a container %s on this node", name)
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return report.ContainerFound{}, fmt.Errorf("container record %s: %w", name, err)
	}
	if len(rec.Original) == 0 && len(rec.Replaced) == 0 {
		return report.ContainerFound{}, fmt.Errorf("container %s was created by the host; nothing was found there", name)
	}
	return report.ContainerFound{Name: name, Module: rec.Module, State: rec.State, FoundID: rec.FoundID, FoundImage: rec.FoundImage,
		FoundAt: rec.FoundAt, Original: rec.Original, ReplacedID: rec.ReplacedID, ReplacedAt: rec.ReplacedAt,
		Replaced: rec.Replaced, Aside: rec.Aside, AsideRestart: rec.AsideRestart, TakeUnderWay: rec.Cutover != nil}, nil
}

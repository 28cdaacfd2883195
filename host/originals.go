package host

// What the host kept of what it found, for `meshd node original`: a file's original (bytes, mode
// and owner) and its latest bytes before a take replaced it; a container's configuration when
// found, the configuration a take replaced and the name that container is kept under.

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"time"

	"meshd/fsm"
)

// FileOriginal describes the recorded original of a file the host found at Path.
type FileOriginal struct {
	Path   string `json:"path"`
	Module string `json:"module"`
	// Hash, Size, Mode (octal, "" when not recorded), UID and GID are the original's, recorded
	// when the file was found, before anything happened to it.
	Hash    string    `json:"hash"`
	Size    int       `json:"size"`
	Mode    string    `json:"mode,omitempty"`
	UID     *int      `json:"uid,omitempty"`
	GID     *int      `json:"gid,omitempty"`
	FoundAt time.Time `json:"found_at"`
	// Latest is the file as it was just before a take replaced it (nil before a take).
	Latest *FileLatest `json:"latest,omitempty"`
}

// FileLatest is a found file as a take saw it just before the cutover.
type FileLatest struct {
	Hash string    `json:"hash"`
	Size int       `json:"size"`
	Mode string    `json:"mode"`
	UID  int       `json:"uid"`
	GID  int       `json:"gid"`
	At   time.Time `json:"at"`
	// ChangedSinceFound: something else changed the file while it was held.
	ChangedSinceFound bool `json:"changed_since_found"`
}

// FileOriginal returns what the host recorded of the file it found at the declared path p.
func (h *Host) FileOriginal(p string) (FileOriginal, error) {
	p = path.Clean(p)
	fr, ok, err := h.st.found(p)
	if err != nil {
		return FileOriginal{}, err
	}
	if !ok {
		return FileOriginal{}, fmt.Errorf("no original recorded for %s: the host found no file there", p)
	}
	v := FileOriginal{Path: p, Module: fr.Module, Hash: fr.Hash, Size: fr.Size, FoundAt: fr.At}
	if m := fr.Meta; m != nil {
		v.Mode, v.UID, v.GID = fmt.Sprintf("%04o", m.Mode&0o7777|setBits(m.Mode)), &m.UID, &m.GID
	}
	if l := fr.Latest; l != nil {
		v.Latest = &FileLatest{Hash: l.Hash, Size: l.Size, Mode: fmt.Sprintf("%04o", l.Meta.Mode&0o7777|setBits(l.Meta.Mode)),
			UID: l.Meta.UID, GID: l.Meta.GID, At: l.At, ChangedSinceFound: l.Hash != fr.Hash}
	}
	return v, nil
}

// setBits turns the recorded setuid, setgid and sticky bits (Go's file mode bits) into the
// octal digit chmod reads.
func setBits(m uint32) uint32 {
	var out uint32
	for _, b := range []struct{ goBit, unix uint32 }{{uint32(fs.ModeSetuid), 0o4000}, {uint32(fs.ModeSetgid), 0o2000}, {uint32(fs.ModeSticky), 0o1000}} {
		if m&b.goBit != 0 {
			out |= b.unix
		}
	}
	return out
}

// Latest returns the bytes of the file at p as a take saw them just before it replaced them.
func (h *Host) Latest(p string) ([]byte, error) {
	b, ok, err := h.st.latest(path.Clean(p))
	if err != nil {
		return nil, fmt.Errorf("latest bytes of %s: %w", p, err)
	}
	if !ok {
		return nil, fmt.Errorf("no latest bytes recorded for %s: no take has replaced a file found there", p)
	}
	return b, nil
}

// ContainerFound describes what the host kept of a container it found at Name.
type ContainerFound struct {
	Name   string `json:"name"`
	Module string `json:"module"`
	State  string `json:"state"`
	// FoundID, FoundImage, FoundAt and Original (the engine's inspect JSON) are the container as
	// found, before anything happened to it.
	FoundID    string          `json:"found_id"`
	FoundImage string          `json:"found_image"`
	FoundAt    time.Time       `json:"found_at"`
	Original   json.RawMessage `json:"original"`
	// Once a take replaced it: the replaced container's id, its configuration just before it
	// was stopped, and the name it is kept under, stopped, until the operator removes it.
	ReplacedID string          `json:"replaced_id,omitempty"`
	ReplacedAt time.Time       `json:"replaced_at,omitzero"`
	Replaced   json.RawMessage `json:"replaced,omitempty"`
	Aside      string          `json:"aside,omitempty"`
	// AsideRestart is the restart policy the replaced container had: it is kept aside with "no",
	// so that a reboot does not start it; stepping back gives it this one again.
	AsideRestart string `json:"aside_restart,omitempty"`
	// TakeUnderWay is set while a take's cutover is unfinished (a crash cut it short).
	TakeUnderWay bool `json:"take_under_way,omitempty"`
}

// ContainerFound returns what the container driver recorded of the container it found at name.
func (h *Host) ContainerFound(name string) (ContainerFound, error) {
	b, ok, err := (&Records{s: h.st, kind: []byte(fsm.KindContainer)}).Get(name)
	if err != nil {
		return ContainerFound{}, err
	}
	if !ok {
		return ContainerFound{}, fmt.Errorf("no record of a container %s on this node", name)
	}
	var rec containerRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return ContainerFound{}, fmt.Errorf("container record %s: %w", name, err)
	}
	if len(rec.Original) == 0 && len(rec.Replaced) == 0 {
		return ContainerFound{}, fmt.Errorf("container %s was created by the host; nothing was found there", name)
	}
	return ContainerFound{Name: name, Module: rec.Module, State: rec.State, FoundID: rec.FoundID, FoundImage: rec.FoundImage,
		FoundAt: rec.FoundAt, Original: rec.Original, ReplacedID: rec.ReplacedID, ReplacedAt: rec.ReplacedAt,
		Replaced: rec.Replaced, Aside: rec.Aside, AsideRestart: rec.AsideRestart, TakeUnderWay: rec.Cutover != nil}, nil
}

package host

// What the host kept of what it found, for `meshd node original`: a file's original (bytes, mode
// and owner) and its latest bytes before a take replaced it; a container's configuration when
// found, the configuration a take replaced and the name that container is kept under.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"

	"meshd/fsm"
	"meshd/host/pass"
	"meshd/report"
)

// FileOriginal returns what the host recorded of the file it found at the declared path p.
func (h *Host) FileOriginal(p string) (report.FileOriginal, error) {
	p = path.Clean(p)
	fr, ok, err := h.st.found(p)
	if err != nil {
		return report.FileOriginal{}, err
	}
	if !ok {
		return report.FileOriginal{}, fmt.Errorf("no original recorded for %s: the host found no file there", p)
	}
	v := report.FileOriginal{Path: p, Module: fr.Module, Hash: fr.Hash, Size: fr.Size, FoundAt: fr.At}
	if m := fr.Meta; m != nil {
		v.Mode, v.UID, v.GID = fmt.Sprintf("%04o", m.Mode&0o7777|setBits(m.Mode)), &m.UID, &m.GID
	}
	if l := fr.Latest; l != nil {
		v.Latest = &report.FileLatest{Hash: l.Hash, Size: l.Size, Mode: fmt.Sprintf("%04o", l.Meta.Mode&0o7777|setBits(l.Meta.Mode)),
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

// foundKeeper is a driver that keeps what it found of a container (the container driver): the
// host reads its records through it, since only the driver knows their shape.
type foundKeeper interface {
	Found(recs *pass.Records, name string) (report.ContainerFound, error)
	Original(recs *pass.Records, name string) (original, replaced json.RawMessage, err error)
}

func (h *Host) foundKeeper() (foundKeeper, error) {
	for _, d := range h.drivers {
		if k, ok := d.(foundKeeper); ok && d.Kind() == fsm.KindContainer {
			return k, nil
		}
	}
	return nil, errors.New("no container driver on this host")
}

// ContainerFound returns what the container driver recorded of the container it found at name.
func (h *Host) ContainerFound(name string) (report.ContainerFound, error) {
	k, err := h.foundKeeper()
	if err != nil {
		return report.ContainerFound{}, err
	}
	return k.Found(h.records(fsm.KindContainer), name)
}

// ContainerOriginal returns what the container driver recorded of a container it found at name:
// its configuration when found and, once a take replaced it, the configuration replaced.
func (h *Host) ContainerOriginal(name string) (original, replaced json.RawMessage, err error) {
	k, err := h.foundKeeper()
	if err != nil {
		return nil, nil, err
	}
	return k.Original(h.records(fsm.KindContainer), name)
}

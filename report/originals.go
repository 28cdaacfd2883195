package report

import (
	"encoding/json"
	"time"
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

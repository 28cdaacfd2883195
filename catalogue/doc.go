// Package catalogue owns module manifests: the YAML a module is written in, the rules a manifest
// must follow before the record accepts it, and the default catalogue meshd ships.
//
// A manifest is read once, by whoever proposes it, and again inside the record's Apply, so every
// server agrees on what a module declares. Validation refuses a bad manifest whole, naming the
// file, the line and the field, and keeps going to report every problem at once: an operator fixing
// a manifest should not need one round trip per typo.
//
// Settings are the one place a module's numbers live. A manifest's settings are only defaults; a
// node's settings (recorded per node, above all the foundation's ports) override them, and
// Resolve fills a module in for one node. No port meshd uses is a constant anywhere else.
//
// # Privilege: an allowlist
//
// A module that does not say privileged: true may write files and mount host paths only in its
// own places: /etc/NAME, /srv/NAME, /var/lib/NAME, /var/log/NAME, /opt/NAME and its data under
// meshd's, /var/lib/meshd/NAME, where NAME is the module's name (Places). A name that is the
// system's own there (systemd, ssh, docker, meshd, ...: SystemName) has no places, whoever is so
// named; a setuid or setgid mode needs the word too. Paths are judged as the system spells them
// (Normalise: cleaned, /var/run is /run, /bin, /sbin and /lib are under /usr). The foundation is
// judged like every module, with no exemption for saying foundation: true: its store and
// registry keep their data in their own places under meshd's data. Anything else, named in a
// table or not, is root-equivalent: Reaches lists it with why, for the operator to see.
// CheckPlaces is the record's judgement from command version 6; CheckDenied is the deny list
// versions 4 and 5 applied, kept so that their log replays as it applied.
package catalogue

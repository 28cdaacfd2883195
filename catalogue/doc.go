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
package catalogue

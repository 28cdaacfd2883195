// Package draft writes module manifests from what is found on a machine: each found container
// exactly as it runs (every field of ctrspec's vocabulary, its image by the reference it was
// created with and checked by the id it runs), the files the operator names, and a setting for
// each port a container publishes. Containers are grouped into modules by their Compose project
// label, else one module per container.
//
// A port published beyond loopback is opened from exactly whom the machine's found firewall lets
// in (Input.Firewall, netfilter/reach): anywhere, one opening a source prefix, or no opening when
// nobody outside reaches it (Module.Closed names the rule that closes it). An opening is an allow
// meshd writes, on an adopted node ahead of the found firewall's own drops, so one wider than the
// found firewall would open the port at the take.
//
// A draft is exact or refused: whatever a manifest cannot reproduce (a field no manifest can
// say, an image reference that now names another image, a value the catalogue would read as a
// setting, a port whose reach depends on a rule reach cannot read) is a Refusal naming node,
// container or file, and field, and nothing is written. Each manifest is parsed back with the
// catalogue before it is offered, so what is written is what `meshd module add` accepts. The
// preview names env variables, never their values.
package draft

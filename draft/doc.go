// Package draft writes module manifests from what is found on a machine: each found container
// exactly as it runs (every field of ctrspec's vocabulary, its image by the reference it was
// created with and checked by the id it runs), the files the operator names, and an opening for
// each port a container publishes beyond loopback, with a setting for each port. Containers are
// grouped into modules by their Compose project label, else one module per container.
//
// A draft is exact or refused: whatever a manifest cannot reproduce (a field no manifest can
// say, an image reference that now names another image, a value the catalogue would read as a
// setting) is a Refusal naming node, container or file, and field, and nothing is written. Each
// manifest is parsed back with the catalogue before it is offered, so what is written is what
// `meshd module add` accepts. The preview names env variables, never their values.
package draft

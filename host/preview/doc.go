// Package preview works out the previews a server gives before an act: the converge preview
// (`meshd converge NODE --preview`): what is reachable on a node now (its listening sockets and
// published ports, from its latest report) read against what its declaration opens, each marked
// declared or closing; the modules the flip takes; the found firewall it retires and how; and a
// plan token, a digest of all of it. And the take preview (`meshd module take --preview`, Take):
// the held containers and files a take replaces, what it creates and what it starts to guard.
// It changes nothing. It sits above host/openings because it composes the derived filter the
// way the opening driver does (openings.FilterText), and above container because it compares
// image references the way the engine does (SpecDiff); its results are report's types.
package preview

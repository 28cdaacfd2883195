// Package preview works out a converge preview (`meshd converge NODE --preview`): what is
// reachable on a node now (its listening sockets and published ports, from its latest report)
// read against what its declaration opens, each marked declared or closing; the modules the
// flip takes; the found firewall it retires and how; and a plan token, a digest of all of it.
// It changes nothing. It sits above host/openings because it composes the derived filter the
// way the opening driver does (openings.FilterText); its result is a report.ConvergePreview.
package preview

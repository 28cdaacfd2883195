// Package report is what a host says of its passes, and what servers and the CLI read of it: the
// Report, each kind's part of it (ContainerReport, OpeningDetail with its FlipView, TunnelDetail),
// the originals a host kept (FileOriginal, ContainerFound), the take preview's types
// (TakePreview), the converge preview's types and text (ConvergePreview, PlanLines), and how far
// an act was carried out (Carried, ReportFlip). It is types and pure functions of them: it
// imports no driver and nothing of the host, so a reader (the api package, the CLI) links
// neither. A report decodes from the JSON a report gossip or the bus carried as well as from the
// value made in this process (Detail).
package report

package lab

// LastCall reports whether probe name's latest recorded call succeeded, for the external tests.
var LastCall = (*Lab).lastCall

// NeighThresholds is neighThresholds, for the external tests.
var NeighThresholds = neighThresholds

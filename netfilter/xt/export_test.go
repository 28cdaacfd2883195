package xt

// RestoreFamily is restoreFamily, for the lab tests (package xt_test).
var RestoreFamily = restoreFamily

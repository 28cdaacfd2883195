// Package openings is the host's opening driver (kind "opening"): it puts the declared
// openings in force through the firewall found on the machine on an adopted node, and through
// meshd's derived filter (and the guard) on a converged one, over netfilter/. It watches the
// firewall for changes between passes, and it carries out the flip between the two modes. It
// reports report.OpeningDetail.
//
// # The flip
//
// A declaration with a pending flip (fsm.Declaration.Flip) asks for the mode it flips to. To
// converged, the opening driver loads the derived filter, then retires the found firewall
// (firewall.Retire: disabled, never flushed), recording the retirement before it starts and
// what Restore needs once it is done. To adopted, it restores the retired firewall first, then
// loads the guard and unloads the filter. The report's opening part says whether the flip is done
// (OpeningDetail.Flip) and which firewall is retired (OpeningDetail.Retired); a server records the
// node's new mode once it reads the flip done.
//
// # Crash points
//
// It reads pass.CrashEnv for the flip (flip.go) and the return:
//
//	flip.after-filter      the derived filter loaded, the found firewall still active
//	flip.before-retire     the retirement recorded in the record store, the found firewall untouched
//	flip.after-retire      the found firewall retired and recorded, the flip not yet reported done
//	return.after-restore   the found firewall enabled again, its record kept, the filter still loaded
//	return.after-guard     the guard loaded again, the derived filter still loaded
package openings

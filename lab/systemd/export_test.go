package systemd

import "context"

// What the external tests (package systemd_test, which may import package lab: lab imports
// this package) use of the internal ones.

// RequireMachine is requireMachine.
var RequireMachine = requireMachine

// BootTimeout is bootTimeout.
const BootTimeout = bootTimeout

// Journal is journal.
func (m *Machine) Journal(ctx context.Context) string { return m.journal(ctx) }

// UnitJournal is unitJournal.
func (m *Machine) UnitJournal(ctx context.Context, units ...string) string {
	return m.unitJournal(ctx, units...)
}

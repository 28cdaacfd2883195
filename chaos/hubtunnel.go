package chaos

// The hub's tunnel taken on the running mesh. ADR 0105 puts the takeover right after the hub is
// adopted, before any other machine joins, and the record holds it to that: a hub's takeover is
// refused once another node holds an address outside the tunnel's range, and the mesh's range
// may not overlap the found tunnel while that runs beside it (ADR 0100). So the chaos run takes
// it there, with the hub the only node, as the operator would (`meshd tunnel take hub wg0` on
// the running mesh, genesis having left the found tunnel alone), under one fault of its own
// drawn from the seed: the hub's agent killed, the hub powered off, rebooted or cut off while
// the take goes on, or its agent crashed at one of the takeover's crash points.

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"time"

	"meshd/lab"
	"meshd/netfilter"
)

// HubTunnelFault draws the fault the hub's takeover runs under from rng: the fault (on the hub),
// its hold, and for a fault other than a crash how long after the take's command it lands. A
// crash is armed before the command is sent.
func HubTunnelFault(rng *rand.Rand) (f Fault, hold, lag time.Duration) {
	kinds := []FaultKind{FaultKill, FaultStop, FaultReboot, FaultCut, FaultCrash, FaultCrash}
	var points []string
	for _, p := range CrashPoints {
		if strings.HasPrefix(p, "tunnel.") {
			points = append(points, p)
		}
	}
	f = Fault{Kind: kinds[rng.Intn(len(kinds))], Machine: "hub"}
	hold = time.Duration(1000+rng.Intn(4000)) * time.Millisecond
	lag = time.Duration(rng.Intn(1500)) * time.Millisecond
	point := points[rng.Intn(len(points))]
	if f.Kind == FaultCrash {
		f.Point = point
		hold += 6 * time.Second
	}
	return f, hold, lag
}

// hubTunnelStep is the step the hub's takeover is said to the lab as.
const hubTunnelStep = "the hub's tunnel taken on the running mesh (tunnel take hub wg0)"

// takeHubTunnel sends `meshd tunnel take hub wg0` (recorded in the history, sent again until it
// is acknowledged or refused as done) under the hub's fault, then waits for the mesh's interface
// to be up in the found one's place and checks the history and the probes.
func (r *Run) takeHubTunnel(ctx context.Context, ms *Mesh, in *Injector, w *Workload, c Config) error {
	rng := rand.New(rand.NewSource(c.Seed ^ 0x7a6e))
	f, hold, lag := HubTunnelFault(rng)
	f.AimedAt = hubTunnelStep
	st := r.step(hubTunnelStep)
	if f.Kind == FaultCrash {
		f.armed = make(chan struct{})
	}
	fctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	injected := make(chan struct{})
	go func() {
		defer close(injected)
		if f.armed == nil {
			select {
			case <-time.After(lag):
			case <-fctx.Done():
			}
		}
		in.Inject(fctx, &f, hold, r.History.Since)
	}()
	if f.armed != nil {
		select { // the agent runs armed: the take's command leads it to the point
		case <-f.armed:
		case <-injected: // the fault could not be caused: the take goes without it
		}
	}
	var last string
	for i := 0; i < 12 && !st.Done && ctx.Err() == nil; i++ {
		p := w.Send(ctx, Op{Client: migrationClient(w), Via: "hub", Node: "hub", Kind: KindTunnel}, []string{"tunnel", "take", "hub", lab.TunnelIface, "--no-wait"})
		if p.Answer == Acked || p.Answer == Refused {
			st.Done = true
			break
		}
		last = fmt.Sprintf("#%d %s: %s", p.ID, p.Answer, p.Output)
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
	<-injected
	if f.Kind == FaultStop || f.Kind == FaultReboot {
		r.tableBack(fctx, ms, &f, netfilter.GuardTable) // the hub alone, adopted: its guard
	}
	r.Faults = append(r.Faults, f)
	r.step(fmt.Sprintf("fault %d healed", len(r.Faults)))
	c.Logf("fault %d at %s: %s", len(r.Faults), time.Duration(f.Begin).Round(time.Millisecond), f)
	if f.Err != "" {
		return fmt.Errorf("fault %s: %s", f, f.Err)
	}
	if !st.Done {
		st.Note = "not done after 12 attempts; the last: " + last
		return fmt.Errorf("%s: %s", hubTunnelStep, st.Note)
	}
	if err := ms.WaitHubTunnel(ctx); err != nil {
		return fmt.Errorf("after fault %s: %w", f, err)
	}
	when := "after fault " + f.String()
	r.check(ops(r.History), when)
	r.probes(ms, when)
	r.tunnelOutagesSoFar(ms, when)
	return nil
}

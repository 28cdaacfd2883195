package container

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
)

// watchedActions are the container events that change what the reconciler would see: a
// container made, started, stopped or dead, renamed, reconfigured, paused, or removed. Exec,
// attach, top and health-check events (a health check runs an exec every interval) are left
// out: they change nothing the reconciler compares.
var watchedActions = []events.Action{events.ActionCreate, events.ActionStart, events.ActionDie,
	events.ActionStop, events.ActionKill, events.ActionRename, events.ActionUpdate, events.ActionPause,
	events.ActionUnPause, events.ActionDestroy, events.ActionOOM}

// Event stream reconnection: the first retry comes after eventsBackoffMin, doubling to
// eventsBackoffMax while the engine does not answer.
const (
	eventsBackoffMin = 100 * time.Millisecond
	eventsBackoffMax = 5 * time.Second
)

// WatchContainers follows the engine's event stream, filtered to containers, and calls changed
// with the names an event concerns (the container's name; on a rename its old name too) until
// ctx ends. When the stream breaks (the engine restarted or went away) it calls changed with no
// names, subscribes again with backoff, and calls changed with no names again once it is back,
// since whatever happened meanwhile was not seen. It returns ctx's error.
func (e *Engine) WatchContainers(ctx context.Context, changed func(names ...string)) error {
	f := filters.NewArgs(filters.Arg("type", string(events.ContainerEventType)))
	for _, a := range watchedActions {
		f.Add("event", string(a))
	}
	backoff := time.Duration(0)
	broken := false
	for {
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
		}
		sctx, cancel := context.WithCancel(ctx)
		msgs, errs := e.cli.Events(sctx, events.ListOptions{Filters: f})
		err := e.followEvents(sctx, msgs, errs, func() {
			// The stream is up (the first event, or the engine answering a ping after
			// subscribing): whatever happened while it was down is looked at once.
			if broken {
				broken = false
				e.log.Info("container events followed again", "engine", e.host)
				changed()
			}
			backoff = 0
		}, changed)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !broken {
			// Said once per outage; the reconciler looks at once, to report the engine gone.
			broken = true
			e.log.Warn("container event stream broken; subscribing again with backoff", "engine", e.host, "err", err)
			changed()
		}
		backoff = min(max(2*backoff, eventsBackoffMin), eventsBackoffMax)
	}
}

// followEvents reads one subscription until it breaks. up is called once the subscription is
// known to be live: the engine answered the subscription (checked by a ping right after it, as
// the stream itself says nothing until an event) or sent an event.
func (e *Engine) followEvents(ctx context.Context, msgs <-chan events.Message, errs <-chan error, up func(), changed func(names ...string)) error {
	pinged := make(chan error, 1)
	go func() {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := e.cli.Ping(pctx)
		pinged <- err
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-pinged:
			pinged = nil
			if err != nil {
				return e.wrap("ping", err)
			}
			up()
		case err, ok := <-errs:
			if !ok || err == nil {
				err = errors.New("event stream ended")
			}
			return e.wrap("container events", err)
		case m := <-msgs:
			up()
			names := []string{strings.TrimPrefix(m.Actor.Attributes["name"], "/")}
			if old := m.Actor.Attributes["oldName"]; old != "" {
				names = append(names, strings.TrimPrefix(old, "/"))
			}
			changed(names...)
		}
	}
}

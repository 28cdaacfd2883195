package raftnode

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// flood is the attacker of issue 26's finding 7: from each of sources (addresses on lo; Linux
// routes all of 127/8 there) it holds perSource TCP connections to target that never say a
// word, dialling again as soon as one is closed, until the test ends. It returns once every
// connection was made once.
func flood(t *testing.T, target string, sources []string, perSource int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	var first sync.WaitGroup
	for _, src := range sources {
		for range perSource {
			wg.Add(1)
			first.Add(1)
			go func() {
				defer wg.Done()
				once := sync.OnceFunc(first.Done)
				defer once()
				d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
				for ctx.Err() == nil {
					c, err := d.DialContext(ctx, "tcp", target)
					once()
					if err != nil {
						select {
						case <-ctx.Done():
						case <-time.After(20 * time.Millisecond):
						}
						continue
					}
					go func() {
						<-ctx.Done()
						c.Close()
					}()
					// Silent: wait for the server to close it, then come back.
					c.Read(make([]byte, 1))
					c.Close()
					select {
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
				}
			}()
		}
	}
	first.Wait()
	// Let the listener accept what is in its backlog.
	time.Sleep(300 * time.Millisecond)
}

// loopbacks are n addresses 127.b.x.y on lo, none of them 127.0.0.1.
func loopbacks(b, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("127.%d.%d.%d", b, 1+i/250, 1+i%250))
	}
	return out
}

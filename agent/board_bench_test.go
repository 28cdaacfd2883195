package agent

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"meshd/api"
	"meshd/board"
	"meshd/fsm"
	"meshd/report"
)

// BenchmarkBoardLook is one look at the board (a `meshd status`, a page view, a metrics scrape)
// over N = 100 and 1000 enrolled nodes, each with a lab-shaped report (fleetReport), side by side:
//   - whole is the board as it was built before board.Cache: every node's row built again from its
//     report (its containers decoded again from generic JSON), its converge previewed again;
//   - unchanged is today's look at a fleet where no report changed since the last;
//   - changed-N/10 is today's look after a tenth of the reports changed (a fleet's second at rest).
func BenchmarkBoardLook(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("N=%d/whole", n), func(b *testing.B) {
			_, rec, feed, _ := fleetOf(b, n)
			reports := map[string]*report.Report{}
			for node, st := range genericReports(b, feed) {
				reports[node] = st.rep
			}
			b.ResetTimer()
			for range b.N {
				rec.Read(func(r *fsm.Record, _ uint64) { board.Build(r, reports, time.Now()) })
			}
		})
		b.Run(fmt.Sprintf("N=%d/unchanged", n), func(b *testing.B) {
			fl, _, _, _ := fleetOf(b, n)
			fl.board()
			b.ResetTimer()
			for range b.N {
				fl.board()
			}
		})
		b.Run(fmt.Sprintf("N=%d/changed-%d", n, n/10), func(b *testing.B) {
			fl, _, feed, _ := fleetOf(b, n)
			fl.board()
			now := time.Now()
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				for j := range n / 10 {
					feed.put(b, fleetReport(fleetNode((i*n/10+j)%n), now.Add(time.Duration(i)*time.Second), false))
				}
				b.StartTimer()
				fl.board()
			}
		})
	}
}

// BenchmarkPageNodes is the status page's nodes built for one render (a page streamed renders at
// every report that arrives) over N = 100 and 1000 enrolled nodes, side by side:
//   - whole is every node built, as the page did before pageNodes: composed and previewed, its
//     report's parts decoded from generic JSON;
//   - unchanged is today's render at a fleet where no report changed since the last;
//   - changed-N/10 is today's render after a tenth of the reports changed.
func BenchmarkPageNodes(b *testing.B) {
	none := func(*fsm.Record, uint64) {}
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("N=%d/whole", n), func(b *testing.B) {
			_, rec, feed, _ := fleetOf(b, n)
			reports := genericReports(b, feed)
			b.ResetTimer()
			for range b.N {
				var fresh pageNodes
				fresh.build(rec, reports, none)
			}
		})
		b.Run(fmt.Sprintf("N=%d/unchanged", n), func(b *testing.B) {
			fl, rec, _, _ := fleetOf(b, n)
			var c pageNodes
			c.build(rec, fl.stampedReports(), none)
			b.ResetTimer()
			for range b.N {
				c.build(rec, fl.stampedReports(), none)
			}
		})
		b.Run(fmt.Sprintf("N=%d/changed-%d", n, n/10), func(b *testing.B) {
			fl, rec, feed, _ := fleetOf(b, n)
			var c pageNodes
			c.build(rec, fl.stampedReports(), none)
			now := time.Now()
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				for j := range n / 10 {
					feed.put(b, fleetReport(fleetNode((i*n/10+j)%n), now.Add(time.Duration(i)*time.Second), false))
				}
				b.StartTimer()
				c.build(rec, fl.stampedReports(), none)
			}
		})
	}
}

// BenchmarkGossipViewAnswer is a server's answer to one node's gossip view call over N = 100 and
// 1000 enrolled nodes, encoded as the bus sends it, side by side:
//   - every-call is the answer before indexes: the view composed from the record and sent whole;
//   - unchanged is today's answer to a node holding the current view;
//   - changed is today's first answer after the record moved the view: composed, indexed, sent.
//
// Each reports the answer's bytes.
func BenchmarkGossipViewAnswer(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("N=%d/every-call", n), func(b *testing.B) {
			rec := fleetRecord(b, n)
			var size int
			b.ResetTimer()
			for range b.N {
				var v api.GossipView
				rec.Read(func(r *fsm.Record, _ uint64) { v = gossipViewOf(r, fleetNode(1)) })
				size = writeView(b, v)
			}
			b.ReportMetric(float64(size), "bytes/answer")
		})
		b.Run(fmt.Sprintf("N=%d/unchanged", n), func(b *testing.B) {
			views := &viewCache{rec: fleetRecord(b, n)}
			held := strconv.FormatUint(views.current().Index, 10)
			var size int
			b.ResetTimer()
			for range b.N {
				size = writeView(b, views.answer(fleetNode(1), held, false))
			}
			b.ReportMetric(float64(size), "bytes/answer")
		})
		b.Run(fmt.Sprintf("N=%d/changed", n), func(b *testing.B) {
			views := &viewCache{rec: fleetRecord(b, n)}
			var size int
			b.ResetTimer()
			for range b.N {
				views.at = 0 // as if the record had moved
				views.v.Index = 0
				size = writeView(b, views.answer(fleetNode(1), "1", false)) // a node holding an older view
			}
			b.ReportMetric(float64(size), "bytes/answer")
		})
		// One node joined since the asker's view: the whole view again (join-whole, an agent from
		// before deltas) or the change since (join-delta), the delta made again each time, as
		// for the first asker after a join.
		for _, delta := range []bool{false, true} {
			name := map[bool]string{false: "join-whole", true: "join-delta"}[delta]
			b.Run(fmt.Sprintf("N=%d/%s", n, name), func(b *testing.B) {
				rec := fleetRecord(b, n-1)
				views := &viewCache{rec: rec}
				held := strconv.FormatUint(views.current().Index, 10)
				joinOne(b, rec, n-1)
				views.current()
				var size int
				b.ResetTimer()
				for range b.N {
					views.deltas = nil
					size = writeView(b, views.answer(fleetNode(1), held, delta))
				}
				b.ReportMetric(float64(size), "bytes/answer")
			})
		}
	}
}

// genericReports are feed's reports decoded as the fleet decoded them before it typed their
// parts (their kinds generic JSON): the yardsticks' reports.
func genericReports(b *testing.B, feed *feedFake) map[string]stampedReport {
	out := map[string]stampedReport{}
	for node, r := range feed.all() {
		var rep report.Report
		if err := json.Unmarshal(r.Payload, &rep); err != nil {
			b.Fatal(err)
		}
		out[node] = stampedReport{rep: &rep, from: "gossip", seq: r.Seq}
	}
	return out
}

// writeView is v as the bus writes it, and its size.
// joinOne enrols node i into a fleetRecord's record.
func joinOne(b *testing.B, rec *fsm.FSM, i int) {
	hash := fmt.Sprintf("token-join-%d", i)
	applyTo(b, rec, fsm.OpTokenCreate, fsm.TokenCreate{Hash: hash, Mode: fsm.Adopted, Expires: time.Now().Add(time.Hour)})
	applyTo(b, rec, fsm.OpNodeEnrol, fsm.Enrol{Node: fleetNode(i), ID: fmt.Sprintf("id-%d", i), TokenHash: hash,
		Settings: map[string]string{"mesh.range": "10.96.0.0/16"}})
}

func writeView(b *testing.B, v api.GossipView) int {
	w := httptest.NewRecorder()
	api.WriteJSON(w, 200, v)
	if w.Code != 200 {
		b.Fatal(w.Code)
	}
	return w.Body.Len()
}

package agent

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"meshd/api"
	"meshd/fsm"
)

// At 1000 nodes the overview says the counts and lists on the board only the nodes not done, with
// no node row or card (each node has its own page); a small fleet is shown whole.
func TestPageAtAThousandNodesCountsFirst(t *testing.T) {
	overview := func(n int) string {
		var v PageOverview
		for i := 1; i <= n; i++ {
			name := fmt.Sprintf("web-%04d", i)
			v.Nodes = append(v.Nodes, PageNode{Name: name, Mode: fsm.Converged, Liveness: "alive"})
			row := api.BoardRow{Node: name, Mode: fsm.Converged}
			if i%100 == 0 {
				row.Mode, row.Next = fsm.Adopted, "taken webapp"
				v.Nodes[i-1].Mode = fsm.Adopted
			}
			v.Board.Rows = append(v.Board.Rows, row)
		}
		var b bytes.Buffer
		if err := pageTmpl.ExecuteTemplate(&b, "overview", v); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	page := overview(1000)
	if !strings.Contains(page, "1000 nodes: 10 adopted, 990 converged; 1000 alive") {
		t.Errorf("the overview of 1000 nodes does not count them")
	}
	if got := strings.Count(page, `class="boardrow"`); got != 10 {
		t.Errorf("the overview of 1000 nodes has %d board rows, want the 10 not done", got)
	}
	if strings.Contains(page, `id="row-`) || strings.Contains(page, `id="node-`) {
		t.Errorf("the overview of 1000 nodes lists each node")
	}
	small := overview(3)
	if strings.Count(small, `class="boardrow"`) != 3 || !strings.Contains(small, `id="node-web-0003"`) {
		t.Errorf("the overview of 3 nodes is not whole")
	}
}

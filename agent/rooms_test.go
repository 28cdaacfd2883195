package agent

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// roomLimit bounds the methods a newcomer reaches through one receiver in this package: its
// own and those it gets by embedding. Past it, the type holds several jobs: give one a room.
const roomLimit = 40

// No receiver in the agent reaches roomLimit methods, and no type embeds or holds the *Agent:
// the roles, the handler sets and the metrics take what they need (role.go's core, each set's
// own fields) rather than the whole agent. Counted from the source, as a reader meets it.
func TestNoReceiverReachesEveryRoom(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]map[string]bool{} // type → method names declared on it
	embeds := map[string][]string{}         // type → the package's types it embeds
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) == 0 {
					continue
				}
				typ := d.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					if methods[id.Name] == nil {
						methods[id.Name] = map[string]bool{}
					}
					methods[id.Name][d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					ts, ok := sp.(*ast.TypeSpec)
					if !ok {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					for _, fl := range st.Fields.List {
						typ := fl.Type
						if s, ok := typ.(*ast.StarExpr); ok {
							typ = s.X
						}
						id, ok := typ.(*ast.Ident)
						switch {
						case !ok:
						case len(fl.Names) == 0:
							embeds[ts.Name.Name] = append(embeds[ts.Name.Name], id.Name)
						case id.Name == "Agent":
							t.Errorf("%s holds the *Agent as %s: hand it what it needs instead", ts.Name.Name, fl.Names[0].Name)
						}
					}
				}
			}
		}
	}
	var reach func(typ string, seen map[string]bool) map[string]bool
	reach = func(typ string, seen map[string]bool) map[string]bool {
		out := map[string]bool{}
		if seen[typ] {
			return out
		}
		seen[typ] = true
		for m := range methods[typ] {
			out[m] = true
		}
		for _, e := range embeds[typ] {
			for m := range reach(e, seen) {
				out[m] = true
			}
		}
		return out
	}
	if len(methods["serverRole"]) == 0 || len(methods["Agent"]) == 0 {
		t.Fatal("no methods read for serverRole or Agent: the source was not read")
	}
	for typ := range methods {
		if n := len(reach(typ, map[string]bool{})); n >= roomLimit {
			t.Errorf("through a %s a reader reaches %d methods (at most %d): give one of its jobs a type of its own", typ, n, roomLimit-1)
		}
	}
	for typ, es := range embeds {
		for _, e := range es {
			if e == "Agent" {
				t.Errorf("%s embeds *Agent: hand it what it needs (role.go's core) instead", typ)
			}
		}
	}
}

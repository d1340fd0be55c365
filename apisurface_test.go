package ferry_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestWireBehindAPI fails when an exported name of a package that speaks
// for a wire protocol shows that protocol's generated types: callers
// speak the package's own types, and the wire can change under them.
func TestWireBehindAPI(t *testing.T) {
	for _, tc := range []struct{ dir, wire string }{
		{"relay/openshell", module + "/proto/openshell/"},
		{"transfer/agent", module + "/proto/ferry/agent/"},
		{"session", module + "/proto/ferry/agent/"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			exported := checkWireBehindAPI(t, tc.dir, tc.wire)
			// A package with nothing exported checks nothing.
			if exported < 10 {
				t.Fatalf("%s: only %d exported declarations seen: a broken parse", tc.dir, exported)
			}
		})
	}
}

// checkWireBehindAPI reports each exported function, method, type or
// field of the package in dir whose declaration names a type from an
// import under wire, and returns how many exported declarations it read.
func checkWireBehindAPI(t *testing.T, dir, wire string) int {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		wireNames := map[string]bool{}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(p, wire) {
				continue
			}
			n := filepath.Base(p)
			if imp.Name != nil {
				n = imp.Name.Name
			}
			wireNames[n] = true
		}
		mentions := func(n ast.Node) bool {
			found := false
			ast.Inspect(n, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && wireNames[id.Name] {
						found = true
					}
				}
				return !found
			})
			return found
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
					continue
				}
				seen++
				if mentions(d.Type) {
					t.Errorf("%s: %s shows wire types in its signature", fset.Position(d.Pos()), d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok || !ts.Name.IsExported() {
						continue
					}
					seen++
					st, isStruct := ts.Type.(*ast.StructType)
					if !isStruct {
						if mentions(ts.Type) {
							t.Errorf("%s: type %s is a wire type", fset.Position(ts.Pos()), ts.Name.Name)
						}
						continue
					}
					for _, fld := range st.Fields.List {
						for _, n := range fld.Names {
							if n.IsExported() && mentions(fld.Type) {
								t.Errorf("%s: field %s.%s is a wire type", fset.Position(n.Pos()), ts.Name.Name, n.Name)
							}
						}
						if len(fld.Names) == 0 && mentions(fld.Type) {
							t.Errorf("%s: %s embeds a wire type", fset.Position(fld.Pos()), ts.Name.Name)
						}
					}
				}
			}
		}
	}
	return seen
}

// exportedRecv reports whether a method's receiver type is exported.
func exportedRecv(fl *ast.FieldList) bool {
	if len(fl.List) == 0 {
		return false
	}
	x := fl.List[0].Type
	if s, ok := x.(*ast.StarExpr); ok {
		x = s.X
	}
	if ix, ok := x.(*ast.IndexExpr); ok {
		x = ix.X
	}
	id, ok := x.(*ast.Ident)
	return ok && id.IsExported()
}

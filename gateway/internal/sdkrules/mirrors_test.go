package sdkrules

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSDKVersion fails when go.mod names a go-sdk other than the one the
// copies were checked against: each may have changed upstream.
func TestSDKVersion(t *testing.T) {
	if v := goModSDK(t); v != SDKVersion {
		t.Fatalf("go-sdk is now %s; re-check each mirrored rule in Mirrors against its source and update SDKVersion (now %s)", v, SDKVersion)
	}
}

// TestMirrorsInSource reads the go-sdk go.mod names from the module cache
// and checks that each mirrored declaration is still there. A declaration
// gone fails; a line that left its declaration fails only at SDKVersion,
// where the table claims to be true, and is logged otherwise, for whoever
// re-checks the rules.
func TestMirrorsInSource(t *testing.T) {
	version := goModSDK(t)
	if !strings.HasPrefix(version, "v") || strings.ContainsAny(version, " =") {
		t.Skipf("go-sdk is %s, not a version in the module cache", version)
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skipf("go env GOMODCACHE: %v", err)
	}
	root := filepath.Join(strings.TrimSpace(string(out)), filepath.FromSlash(SDKModule)+"@"+version)
	if _, err := os.Stat(root); err != nil {
		t.Skipf("the go-sdk's source is not in the module cache: %v", err)
	}
	files := map[string]*declSpans{}
	for _, m := range Mirrors {
		spans, ok := files[m.SDKFile]
		if !ok {
			spans, err = readDecls(filepath.Join(root, filepath.FromSlash(m.SDKFile)))
			if err != nil {
				t.Errorf("%s: %v", m.SDKFile, err)
			}
			files[m.SDKFile] = spans
		}
		if spans == nil {
			continue
		}
		span, ok := spans.byName[m.SDKFunc]
		if !ok {
			t.Errorf("%s@%s: %s no longer declares %s, which %s mirrors (%s); find where the rule went and update Mirrors",
				SDKModule, version, m.SDKFile, m.SDKFunc, m.Home, m.Rule)
			continue
		}
		if m.SDKLine < span[0] || m.SDKLine > span[1] {
			report := t.Errorf
			if version != SDKVersion {
				report = t.Logf
			}
			report("%s:%d is not in %s, which is at lines %d-%d in %s; update SDKLine of %q",
				m.SDKFile, m.SDKLine, m.SDKFunc, span[0], span[1], version, m.Rule)
		}
	}
}

// TestMirrorsHome checks that each mirror names a declaration of this
// package, and that each exported declaration holding a copy is listed.
func TestMirrorsHome(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	var copies []string
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for n, kind := range topLevel(f) {
			declared[n] = true
			// The table and its version are not copies; nor are types,
			// whose methods are.
			if name != "doc.go" && kind != "type" && ast.IsExported(n[strings.LastIndex(n, ".")+1:]) {
				copies = append(copies, n)
			}
		}
	}
	homes := map[string]bool{}
	for _, m := range Mirrors {
		homes[m.Home] = true
		if !declared[m.Home] {
			t.Errorf("Mirrors names %s as the home of %q, which this package does not declare", m.Home, m.Rule)
		}
		if m.Rule == "" || m.SDKFile == "" || m.SDKLine <= 0 || m.SDKFunc == "" {
			t.Errorf("mirror %+v is incomplete", m)
		}
	}
	for _, n := range copies {
		if !homes[n] {
			t.Errorf("%s is not the home of any entry in Mirrors; list the SDK rule it copies", n)
		}
	}
}

// goModSDK returns the go-sdk version the module's go.mod requires, or
// what a replace directive puts in its place.
func goModSDK(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			v := sdkIn(string(data))
			if v == "" {
				t.Fatalf("%s does not require %s", filepath.Join(dir, "go.mod"), SDKModule)
			}
			return v
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the package")
		}
		dir = parent
	}
}

// sdkIn reads the go-sdk's version from the text of a go.mod: the
// replacement if one is named, else the version required.
func sdkIn(gomod string) string {
	var required, replaced string
	for line := range strings.Lines(gomod) {
		line, _, _ = strings.Cut(line, "//")
		f := strings.Fields(line)
		if len(f) > 0 && (f[0] == "require" || f[0] == "replace") {
			f = f[1:]
		}
		if len(f) < 2 || f[0] != SDKModule {
			continue
		}
		if i := slices.Index(f, "=>"); i >= 0 {
			replaced = "replaced by " + strings.Join(f[i+1:], " ")
			continue
		}
		required = f[1]
	}
	if replaced != "" {
		return replaced
	}
	return required
}

// declSpans are the first and last lines of each top-level declaration of
// a file, by name: "f", "(*T).m" or "(T).m", a const, var or type.
type declSpans struct{ byName map[string][2]int }

func readDecls(path string) (*declSpans, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	d := &declSpans{byName: map[string][2]int{}}
	span := func(n ast.Node) [2]int { return [2]int{fset.Position(n.Pos()).Line, fset.Position(n.End()).Line} }
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			d.byName[funcName(decl)] = span(decl)
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range spec.Names {
						d.byName[n.Name] = span(spec)
					}
				case *ast.TypeSpec:
					d.byName[spec.Name.Name] = span(spec)
				}
			}
		}
	}
	return d, nil
}

// topLevel names a file's top-level declarations, with their kinds.
func topLevel(f *ast.File) map[string]string {
	names := map[string]string{}
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			names[funcName(decl)] = "func"
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range spec.Names {
						names[n.Name] = decl.Tok.String()
					}
				case *ast.TypeSpec:
					names[spec.Name.Name] = "type"
				}
			}
		}
	}
	return names
}

// funcName is "f" for a function, "(*T).m" or "(T).m" for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	star := ""
	if s, ok := typ.(*ast.StarExpr); ok {
		star, typ = "*", s.X
	}
	if g, ok := typ.(*ast.IndexExpr); ok {
		typ = g.X
	}
	if g, ok := typ.(*ast.IndexListExpr); ok {
		typ = g.X
	}
	id, _ := typ.(*ast.Ident)
	if id == nil {
		return fn.Name.Name
	}
	return "(" + star + id.Name + ")." + fn.Name.Name
}

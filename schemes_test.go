package lock_test

import (
	"context"
	"errors"
	"go/ast"
	"go/token"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/distlock/lock"
	"github.com/distlock/lock/driver"
)

// declaredSchemes reads, from the source of every package of the workspace that
// registers a driver, the string constants named Scheme... (Scheme, SchemeTLS,
// SchemeAlias, ...), and maps each to the package's import path.
func declaredSchemes(t *testing.T) map[string]string {
	t.Helper()
	schemes := map[string]string{}
	for _, p := range workspacePackages(t) {
		var consts []string
		registers := false
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Register" {
						if id, ok := sel.X.(*ast.Ident); ok && id.Name == "driver" {
							registers = true
						}
					}
				case *ast.GenDecl:
					if n.Tok != token.CONST {
						return true
					}
					for _, spec := range n.Specs {
						vs := spec.(*ast.ValueSpec)
						for i, name := range vs.Names {
							if !strings.HasPrefix(name.Name, "Scheme") || i >= len(vs.Values) {
								continue
							}
							if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								s, err := strconv.Unquote(lit.Value)
								if err != nil {
									t.Fatal(err)
								}
								consts = append(consts, s)
							}
						}
					}
				}
				return true
			})
		}
		if !registers {
			continue
		}
		if len(consts) == 0 {
			t.Errorf("%s registers a driver but declares no Scheme constant", p.importPath)
		}
		for _, s := range consts {
			if other, dup := schemes[s]; dup {
				t.Errorf("scheme %s declared by %s and %s", s, other, p.importPath)
			}
			schemes[s] = p.importPath
		}
	}
	return schemes
}

// TestOpenNamesTheImportOfEveryProvidedScheme checks, for every scheme a driver
// of this repository declares, that Open's error for that scheme without the
// driver names the blank import that registers it, both when other drivers are
// registered and when none is.
func TestOpenNamesTheImportOfEveryProvidedScheme(t *testing.T) {
	needWorkspace(t)
	declared := declaredSchemes(t)
	if !slices.Equal(slices.Sorted(maps.Keys(lock.DriverPackages)), slices.Sorted(maps.Keys(declared))) {
		t.Errorf("Open's table of schemes %v differs from the drivers' Scheme constants %v",
			slices.Sorted(maps.Keys(lock.DriverPackages)), slices.Sorted(maps.Keys(declared)))
	}
	for scheme, pkg := range declared {
		wantImport := `import _ "` + pkg + `"`
		none := lock.UnknownSchemeError(scheme, nil)
		if !errors.Is(none, lock.ErrUnknownScheme) || !strings.Contains(none.Error(), wantImport) || !strings.Contains(none.Error(), "no driver is registered") {
			t.Errorf("with no driver registered, the error for %s:// is %q; want ErrUnknownScheme saying so and naming %s", scheme, none, wantImport)
		}
		if _, registered := driver.Lookup(scheme); registered {
			continue // this test binary imports the driver
		}
		_, err := lock.Open(context.Background(), scheme+"://user:hunter2@host/x")
		if !errors.Is(err, lock.ErrUnknownScheme) {
			t.Errorf("Open(%s://...) = %v, want ErrUnknownScheme", scheme, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, wantImport) || !strings.Contains(msg, "mem") || strings.Contains(msg, "hunter2") {
			t.Errorf("Open(%s://...) error %q: want it to name %s and the registered mem, without the password", scheme, msg, wantImport)
		}
	}
}

// TestOpenOfAForeignSchemeListsTheProvidedOnes checks that a scheme no driver
// here provides gets the list of those that are provided, with no driver
// registered too.
func TestOpenOfAForeignSchemeListsTheProvidedOnes(t *testing.T) {
	msg := lock.UnknownSchemeError("nosuch", nil).Error()
	for _, want := range []string{`"nosuch"`, "no driver is registered", "redis+sentinel", "postgresql", "etcds", "zk (zkdriver)", `import _ "github.com/distlock/lock/<driver>"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
}

// driver.PortableParams is the list drivers name in their unknown-parameter
// errors: Open must read (and take out) every parameter on it, whatever the
// scheme, so that a driver never sees one.
func TestOpenReadsEveryPortableParameter(t *testing.T) {
	good := map[string]string{"ttl": "5s", "auto_refresh": "false", "prefix": "p", "open_timeout": "5s", "close_timeout": "1s"}
	for _, name := range driver.PortableParams() {
		v, ok := good[name]
		if !ok {
			t.Errorf("portable parameter %s has no example here: does Open read it?", name)
			continue
		}
		lk, err := lock.Open(context.Background(), "mem://?"+name+"="+v)
		if err != nil {
			t.Errorf("Open with the portable %s=%s: %v", name, v, err)
			continue
		}
		_ = lk.Close()
	}
}

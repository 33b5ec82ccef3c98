package lock

import (
	"fmt"
	"sort"
	"strings"
)

// driverPackages maps each URL scheme that a driver of this repository
// registers to the package a program imports for it, so that Open's error for
// a scheme nobody registered names the missing import. The driver packages are
// not imported here (package lock compiles no backend client); a test checks
// this table against the Scheme constants the drivers declare.
var driverPackages = map[string]string{
	"mem":             "github.com/distlock/lock/memdriver",
	"file":            "github.com/distlock/lock/filedriver",
	"redis":           "github.com/distlock/lock/redisdriver",
	"rediss":          "github.com/distlock/lock/redisdriver",
	"redis+unix":      "github.com/distlock/lock/redisdriver",
	"redis+sentinel":  "github.com/distlock/lock/redisdriver",
	"rediss+sentinel": "github.com/distlock/lock/redisdriver",
	"redis+cluster":   "github.com/distlock/lock/redisdriver",
	"rediss+cluster":  "github.com/distlock/lock/redisdriver",
	"redlock":         "github.com/distlock/lock/redlockdriver",
	"postgres":        "github.com/distlock/lock/pgadvisory",
	"postgresql":      "github.com/distlock/lock/pgadvisory",
	"etcd":            "github.com/distlock/lock/etcddriver",
	"etcds":           "github.com/distlock/lock/etcddriver",
	"zk":              "github.com/distlock/lock/zkdriver",
}

// unknownSchemeError is Open's error for a scheme no driver registered: it
// names the blank import that registers it, when a driver of this repository
// provides the scheme, and otherwise the schemes they provide; and it lists
// the schemes that are registered.
func unknownSchemeError(scheme string, registered []string) error {
	reg := "no driver is registered"
	if len(registered) > 0 {
		reg = "registered schemes are " + strings.Join(registered, ", ")
	}
	if pkg, ok := driverPackages[scheme]; ok {
		return fmt.Errorf("%w %q: %s; add import _ %q to the program to register %s://",
			ErrUnknownScheme, scheme, reg, pkg, scheme)
	}
	return fmt.Errorf("%w %q: %s; distlock's drivers provide %s (import _ \"github.com/distlock/lock/<driver>\")",
		ErrUnknownScheme, scheme, reg, providedSchemes())
}

// providedSchemes lists the schemes of this repository's drivers by package:
// "etcd, etcds (etcddriver), file (filedriver), ...".
func providedSchemes() string {
	byPkg := map[string][]string{}
	for s, pkg := range driverPackages {
		byPkg[pkg] = append(byPkg[pkg], s)
	}
	groups := make([]string, 0, len(byPkg))
	for pkg, schemes := range byPkg {
		sort.Strings(schemes)
		groups = append(groups, strings.Join(schemes, ", ")+" ("+pkg[strings.LastIndex(pkg, "/")+1:]+")")
	}
	sort.Strings(groups)
	return strings.Join(groups, "; ")
}

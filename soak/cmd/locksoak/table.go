package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/distlock/lock/soak/run"
)

// printTable prints one Markdown row per run directory (its summary.json),
// for docs/RELIABILITY.md.
func printTable(dirs []string) int {
	fmt.Println("| backend | seed | duration | TTL | acquires | fenced writes | faults | violations | loss detected, p50 / p99 / max |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "locksoak:", err)
			return 2
		}
		var s run.Summary
		if err := json.Unmarshal(b, &s); err != nil {
			fmt.Fprintln(os.Stderr, "locksoak:", dir, err)
			return 2
		}
		var kinds []string
		total := 0
		for k, n := range s.Faults {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
			total += n
		}
		sort.Strings(kinds)
		writes := fmt.Sprint(s.Ops["write"])
		if s.Unfenced {
			writes += " (unfenced)"
		}
		loss := "–"
		if l := s.LossDetectionMS; l != nil {
			loss = fmt.Sprintf("%.0f / %.0f / %.0f ms", l["p50"], l["p99"], l["max"])
		}
		fmt.Printf("| %s | %d | %s | %s | %d | %s | %d: %s | %d | %s |\n", s.Backend, s.Seed, s.Duration, s.TTL,
			s.Ops["acquire"], writes, total, strings.Join(kinds, ", "), len(s.Violations), loss)
	}
	return 0
}

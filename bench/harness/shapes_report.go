package harness

import "strings"

// rwColumns and semColumns are the figures of the shape tables.
var (
	rwColumns  = []Metric{RWOps, RWReadP50, RWReadP99, RWWriteP50, RWWriteP99, RWWriteMax, RWReaders, RWMinShare, RWViolations}
	semColumns = []Metric{SemOps, SemP50, SemP99, SemMax, SemHolders, SemMinShare, SemViolations}
)

// shapeOnly says that c runs none of the exclusive lock's scenarios: a
// contestant there only for the read-write or semaphore comparison.
func shapeOnly(c *Contestant) bool {
	for _, s := range MutexScenarios {
		if _, na := c.NA[s]; !na {
			return false
		}
	}
	return true
}

// runsAny says that c runs at least one of the scenarios of cols.
func runsAny(c *Contestant, cols []Metric) bool {
	for _, m := range cols {
		if _, na := c.NA[m.Scenario]; !na {
			return true
		}
	}
	return false
}

// shapes writes the read-heavy and semaphore sections: one table each over
// every backend, the contestants that have the shape, ours ÷ each other
// contestant of its backend in operations per second, and why the others
// have no figures.
func (p *printer) shapes(r *Results) {
	cfg := r.Config.shapeConfig()
	if cfg.runs(ReadHeavy) {
		p.f("## Read-write locks: read-heavy\n\n")
		p.f("%d goroutines over %d clients on one key; each operation is a reader (shared lock) with probability %.0f%% and otherwise a writer (exclusive), and holds for %v. ", cfg.ShapeGoroutines, cfg.ShapeClients, 100*cfg.ReadShare, cfg.ShapeHold)
		p.f("Ops are completed acquisitions per second; waits run from asking to holding, per class (an Acquire cut off by the end of a turn counts with the time it had waited, so a starved writer shows in the worst wait as a lower bound). ")
		p.f("Each goroutine checks on entering that no writer is beside anyone (violations; the run fails on any), and the most readers seen inside together shows that the shared lock is shared (a run where readers never overlap fails); min share is the fewest acquisitions of one goroutine as a fraction of the fair share (every goroutine asks alike: below 0.5 is starvation). The raw recipes and peers are described in bench/README.md.\n\n")
		p.shapeTable(r, ReadHeavy, rwColumns, RWOps)
	}
	if cfg.runs(Semaphore) {
		p.f("## Semaphores\n\n")
		p.f("%d goroutines over %d clients take one of %d permits of one key, each holding for %v. ", cfg.ShapeGoroutines, cfg.ShapeClients, cfg.Permits, cfg.ShapeHold)
		p.f("Ops are completed acquisitions per second; waits run from asking to holding. Each goroutine checks on entering that at most %d hold at once (violations; the run fails on any); most holders together shows the permits are used; min share is the fewest acquisitions of one goroutine as a fraction of the fair share (below 0.5 is starvation).\n\n", cfg.Permits)
		p.shapeTable(r, Semaphore, semColumns, SemOps)
	}
}

func (p *printer) shapeTable(r *Results, s Scenario, cols []Metric, ratio Metric) {
	p.f("| backend | contestant |")
	for _, m := range cols {
		p.f(" %s |", heading(m))
		if m == ratio {
			p.f(" ours ÷ it |")
		}
	}
	p.f("\n|---|---|")
	for _, m := range cols {
		p.f("---:|")
		if m == ratio {
			p.f("---:|")
		}
	}
	p.f("\n")
	var notes []string
	for _, group := range r.Groups() {
		var ours *Contestant
		for _, c := range group {
			if _, na := c.NA[s]; !na && c.Role == Ours {
				ours = c
				break
			}
		}
		for _, c := range group {
			if why, na := c.NA[s]; na {
				// A recipe of the other shape needs no note.
				if why != "" && !(c.Role != Ours && shapeOnly(c)) {
					notes = append(notes, "- "+c.Backend+", "+c.Label()+": n/a, "+why)
				}
				continue
			}
			p.f("| %s | %s |", c.Backend, bold(c))
			for _, m := range cols {
				sp := Summarise(r.Get(c, m))
				p.f(" %s |", spread(sp))
				if m == ratio {
					cell := ""
					if ours != nil && c != ours && sp.N > 0 {
						cell = ratioCell(Summarise(Ratios(r.Get(ours, m), r.Get(c, m))))
					}
					p.f(" %s |", cell)
				}
			}
			p.f("\n")
		}
	}
	p.f("\n")
	if len(notes) > 0 {
		p.f("%s\n\n", strings.Join(notes, "\n"))
	}
}

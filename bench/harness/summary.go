package harness

import "io"

// summaryColumns are the figures of the short table, each with ours ÷ it.
var summaryColumns = []Metric{UncP50, Handoffs}

// summary writes one table for all backends: per contestant the
// uncontended p50 and the contended handoffs per second, each beside ours ÷
// that contestant in the same repeats.
func (p *printer) summary(r *Results) {
	p.f("| backend | library (setting) |")
	for _, m := range summaryColumns {
		p.f(" %s | ours ÷ it |", heading(m))
	}
	p.f("\n|---|---|")
	for range summaryColumns {
		p.f("---:|---:|")
	}
	p.f("\n")
	for _, group := range r.Groups() {
		var ours *Contestant
		for _, c := range group {
			if c.Role == Ours {
				ours = c
				break
			}
		}
		for _, c := range group {
			if !runsAny(c, summaryColumns) {
				continue
			}
			p.f("| %s | %s |", c.Backend, bold(c))
			for _, m := range summaryColumns {
				cell, ratio := "n/a", ""
				if _, na := c.NA[m.Scenario]; !na {
					s := Summarise(r.Get(c, m))
					cell = spread(s)
					if ours != nil && c != ours && s.N > 0 {
						ratio = ratioCell(Summarise(Ratios(r.Get(ours, m), r.Get(c, m))))
					}
				}
				p.f(" %s | %s |", cell, ratio)
			}
			p.f("\n")
		}
	}
	p.f("\n")
}

// WriteReadmeSection writes the README's benchmark section: the chart, the
// short table, the command, the machine and what the figures mean.
func (r *Results) WriteReadmeSection(w io.Writer, m Machine) error {
	p := &printer{w: w}
	p.f("## Benchmarks\n\n")
	p.f("![handoffs per second and uncontended latency, distlock beside each library](bench/results/chart.png)\n\n")
	p.f("Each distlock driver against the raw protocol and the Go libraries people use for the same server, ")
	p.f("measured in one run against the same private servers: uncontended acquire+release p50, and handoffs per second between %d goroutines over 2 clients contending for one key. ", r.Config.Contenders)
	p.f("Figures are medians over %d repeats with the range in brackets; \"ours ÷ it\" is taken within each repeat (below 1 is better for latency, above 1 for handoffs), ours being the first distlock row of the backend (its default; the other rows' ratios are in RESULTS.md). ", r.Config.Repeats)
	p.f("Polling libraries run at their documented default and at a tuned 1 ms retry; etcd's concurrency.Mutex and go-zookeeper's zk.Lock wait on watches and have no speed setting, so they run once, at their defaults. ")
	p.f("Every scenario, the held-locks and many-keys (scale) figures, the targets of the driver issues and the settings of each library are in [bench/results/RESULTS.md](bench/results/RESULTS.md).\n\n")
	p.summary(r)
	p.f("Produced by `%s` (about %s; `-quick` runs everything briefly) on %s, %d CPUs, %s, %s; %s. Servers: %s.\n\n",
		"scripts/bench", r.Took.Round(60e9), m.CPU, m.CPUs, m.OS, m.Go, m.Pinning, m.Servers)
	p.f("What the numbers mean: the cost each library adds over the same server on loopback, and how it behaves when many clients want one lock (a polling library's retry delay, not the server, sets its handoff rate). ")
	p.f("What they do not mean: latency over a real network (add a round trip per request: Redlock and etcd's Mutex make more requests than a single SET), throughput of your workload, or anything about safety — ")
	p.f("that is the conformance suite's job; here it is only checked that no library let two holders in at once. ")
	p.f("The machine was shared with other work")
	if m.Load != "" {
		p.f(" (load average %s)", m.Load)
	}
	p.f(", so absolute figures move between runs; the ratios, measured side by side, move much less.\n")
	return p.err
}

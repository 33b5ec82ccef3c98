package harness

// Metric is one figure a scenario reports.
type Metric struct {
	Key      string
	Scenario Scenario
	Title    string // column heading
	Unit     string
	// Lower says that a smaller value is better (latencies, bytes).
	Lower bool
}

// The figures, in report order.
var (
	UncP50      = Metric{"unc_p50", Uncontended, "uncontended p50", "µs", true}
	UncP99      = Metric{"unc_p99", Uncontended, "uncontended p99", "µs", true}
	UncMean     = Metric{"unc_mean", Uncontended, "uncontended mean", "µs", true}
	DistinctOps = Metric{"distinct_ops", Distinct, "distinct keys", "ops/s", false}
	Handoffs    = Metric{"handoffs", Contended, "handoffs", "/s", false}
	HandoffP50  = Metric{"handoff_p50", Contended, "handoff p50", "µs", true}
	HandoffP99  = Metric{"handoff_p99", Contended, "handoff p99", "µs", true}
	WaitP99     = Metric{"wait_p99", Contended, "acquire-wait p99", "ms", true}
	CutOff      = Metric{"cut_off", Contended, "waits cut off", "%", true}
	MinShare    = Metric{"min_share", Contended, "min share", "× fair", false}
	GaveUp      = Metric{"gave_up", Contended, "gave up", "acquires", true}
	Violations  = Metric{"violations", Contended, "exclusion violations", "", true}
	HeldBytes   = Metric{"held_bytes", Held, "memory", "B/lock", true}
	HeldGorout  = Metric{"held_goroutines", Held, "goroutines", "/lock", true}
	HeldConns   = Metric{"held_conns", Held, "connections", "", true}
	HeldReqs    = Metric{"held_reqs", Held, "server requests", "/s", true}
)

// Metrics lists every figure.
var Metrics = []Metric{
	UncP50, UncP99, UncMean, DistinctOps,
	Handoffs, HandoffP50, HandoffP99, WaitP99, CutOff, MinShare, GaveUp, Violations,
	HeldBytes, HeldGorout, HeldConns, HeldReqs,
}

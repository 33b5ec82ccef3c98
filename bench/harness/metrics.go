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
	// DistinctWide is the distinct-keys scenario at Config.WideGoroutines.
	DistinctWide = Metric{"distinct_wide_ops", Distinct, "distinct keys", "ops/s", false}
	Handoffs     = Metric{"handoffs", Contended, "handoffs", "/s", false}
	HandoffP50   = Metric{"handoff_p50", Contended, "handoff p50", "µs", true}
	HandoffP99   = Metric{"handoff_p99", Contended, "handoff p99", "µs", true}
	WaitP99      = Metric{"wait_p99", Contended, "acquire-wait p99", "ms", true}
	CutOff       = Metric{"cut_off", Contended, "waits cut off", "%", true}
	MinShare     = Metric{"min_share", Contended, "min share", "× fair", false}
	GaveUp       = Metric{"gave_up", Contended, "gave up", "acquires", true}
	Violations   = Metric{"violations", Contended, "exclusion violations", "", true}
	HeldBytes    = Metric{"held_bytes", Held, "memory", "B/lock", true}
	HeldGorout   = Metric{"held_goroutines", Held, "goroutines", "/lock", true}
	HeldConns    = Metric{"held_conns", Held, "connections", "", true}
	HeldReqs     = Metric{"held_reqs", Held, "server requests", "/s", true}

	ScaleBytes     = Metric{"scale_bytes", Scale, "memory", "B/lock", true}
	ScaleGorout    = Metric{"scale_goroutines", Scale, "goroutines", "/lock", true}
	ScaleConns     = Metric{"scale_conns", Scale, "connections", "", true}
	ScaleReqs      = Metric{"scale_reqs", Scale, "server requests", "/s", true}
	ScaleLateness  = Metric{"scale_late_p99", Scale, "refresh lateness p99", "% of TTL", true}
	ScaleRefreshes = Metric{"scale_refreshes", Scale, "refreshes observed", "", false}
	ScaleLosses    = Metric{"scale_losses", Scale, "locks lost", "", true}

	RWOps        = Metric{"rw_ops", ReadHeavy, "ops", "/s", false}
	RWReadP50    = Metric{"rw_read_p50", ReadHeavy, "reader wait p50", "µs", true}
	RWReadP99    = Metric{"rw_read_p99", ReadHeavy, "reader wait p99", "µs", true}
	RWWriteP50   = Metric{"rw_write_p50", ReadHeavy, "writer wait p50", "µs", true}
	RWWriteP99   = Metric{"rw_write_p99", ReadHeavy, "writer wait p99", "µs", true}
	RWWriteMax   = Metric{"rw_write_max", ReadHeavy, "writer worst wait", "ms", true}
	RWReaders    = Metric{"rw_readers", ReadHeavy, "most readers together", "", false}
	RWMinShare   = Metric{"rw_min_share", ReadHeavy, "min share", "× fair", false}
	RWViolations = Metric{"rw_violations", ReadHeavy, "violations", "", true}

	SemOps        = Metric{"sem_ops", Semaphore, "ops", "/s", false}
	SemP50        = Metric{"sem_p50", Semaphore, "wait p50", "µs", true}
	SemP99        = Metric{"sem_p99", Semaphore, "wait p99", "µs", true}
	SemMax        = Metric{"sem_max", Semaphore, "worst wait", "ms", true}
	SemHolders    = Metric{"sem_holders", Semaphore, "most holders together", "", false}
	SemMinShare   = Metric{"sem_min_share", Semaphore, "min share", "× fair", false}
	SemViolations = Metric{"sem_violations", Semaphore, "violations", "", true}
)

// violationMetrics are the figures that count broken exclusion: two holders of
// a mutex, a writer beside anyone, more holders than permits.
var violationMetrics = []Metric{Violations, RWViolations, SemViolations}

// lossMetrics are the figures that count locks lost while held: a failure of
// the run, as a violation is.
var lossMetrics = []Metric{ScaleLosses}

// Metrics lists every figure.
var Metrics = []Metric{
	UncP50, UncP99, UncMean, DistinctOps, DistinctWide,
	Handoffs, HandoffP50, HandoffP99, WaitP99, CutOff, MinShare, GaveUp, Violations,
	HeldBytes, HeldGorout, HeldConns, HeldReqs,
	ScaleBytes, ScaleGorout, ScaleConns, ScaleReqs, ScaleLateness, ScaleRefreshes, ScaleLosses,
	RWOps, RWReadP50, RWReadP99, RWWriteP50, RWWriteP99, RWWriteMax, RWReaders, RWMinShare, RWViolations,
	SemOps, SemP50, SemP99, SemMax, SemHolders, SemMinShare, SemViolations,
}

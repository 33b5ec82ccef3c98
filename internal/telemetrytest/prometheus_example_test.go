package telemetrytest

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/distlock/lock"
)

// The Prometheus example of docs/OBSERVABILITY.md, run: distlock's metrics
// through the OpenTelemetry Prometheus exporter, and the names they get.
func Example_prometheus() {
	ctx := context.Background()
	exporter, err := prometheus.New()
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { _ = mp.Shutdown(ctx) }()
	locker, err := lock.Open(ctx, "mem://prometheus-example", lock.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	l, err := locker.Acquire(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	_ = l.Release(ctx)
	// A lock lost, so that the loss counter has a series.
	l, err = locker.Acquire(ctx, "invoice:43")
	if err != nil {
		log.Fatal(err)
	}
	if err := locker.ForceRelease(ctx, "invoice:43"); err != nil {
		log.Fatal(err)
	}
	<-l.Lost()

	// What GET /metrics serves (http.Handle("/metrics", promhttp.Handler())),
	// without a listener: the metric families, and the latency buckets.
	rec := httptest.NewRecorder()
	promhttp.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	var names []string
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "# TYPE distlock_"); ok {
			names = append(names, "distlock_"+name)
		}
		if strings.HasPrefix(line, "distlock_acquire_duration_seconds_bucket") && strings.Contains(line, `le="0.001"`) {
			fmt.Println("has a 1ms bucket")
		}
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Println(n)
	}
	// Output:
	// has a 1ms bucket
	// distlock_acquire_duration_seconds histogram
	// distlock_acquire_wait_duration_seconds histogram
	// distlock_lock_hold_duration_seconds histogram
	// distlock_lock_losses_total counter
	// distlock_locks_held gauge
}

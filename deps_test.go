package redisdelay_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The core package must not link Prometheus into every importer: its
// metrics live in the prommetrics package, for those who opt in.
func TestDeps_CoreImportsNoPrometheus(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Skipf("go list -deps: %v\n%s", err, out)
	}
	var prom []string
	for _, p := range strings.Fields(string(out)) {
		if strings.Contains(p, "prometheus") || strings.Contains(p, "protobuf") {
			prom = append(prom, p)
		}
	}
	t.Logf("%d non-standard packages", len(strings.Fields(string(out))))
	if len(prom) > 0 {
		t.Errorf("the core package imports %d Prometheus/protobuf packages, e.g. %v: keep them in prommetrics", len(prom), prom[:min(3, len(prom))])
	}
}

// The core package must not link OpenTelemetry: tracing lives in the
// otelredisdelay package, which uses the OpenTelemetry API only, never an
// SDK or exporter (the application chooses those).
func TestDeps_CoreImportsNoOpenTelemetry(t *testing.T) {
	t.Parallel()
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
		if err != nil {
			t.Skipf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		return strings.Fields(string(out))
	}
	for _, p := range deps(".") {
		if strings.HasPrefix(p, "go.opentelemetry.io/") {
			t.Errorf("the core package imports %s: keep OpenTelemetry in otelredisdelay", p)
		}
	}
	otelDeps := deps("./otelredisdelay")
	for _, p := range otelDeps {
		if strings.HasPrefix(p, "go.opentelemetry.io/otel/sdk") || strings.Contains(p, "/exporters/") {
			t.Errorf("otelredisdelay imports %s: it must use the OpenTelemetry API only", p)
		}
	}
	t.Logf("otelredisdelay links %d non-standard packages", len(otelDeps))
}

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

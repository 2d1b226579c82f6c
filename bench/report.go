package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Report is everything one bench run measured; results.json holds it as is.
type Report struct {
	Meta     Meta          `json:"meta"`
	Rows     []Row         `json:"rows"`
	Lateness []LatenessRun `json:"lateness"`
	Runs     []*Run        `json:"runs"`
	Idle     []IdleRun     `json:"idle"`
	// Scenario 7's ladder, why it stopped short of a size (if it did), and
	// scenario 10's runs.
	Backlog      []*BacklogStep `json:"backlog,omitempty"`
	BacklogLimit string         `json:"backlog_limit,omitempty"`
	Spikes       []*SpikeRun    `json:"spikes,omitempty"`
	Topics       []*TopicStep   `json:"topics,omitempty"` // scenario 11
	Groups       *GroupsReport  `json:"groups,omitempty"` // scenario 12
	Cost         []*CostRun     `json:"cost,omitempty"`   // scenario 13
	Errors       []string       `json:"errors,omitempty"`
}

// Meta says how and where the figures were measured.
type Meta struct {
	Command  string            `json:"command"`
	Started  time.Time         `json:"started"`
	Seconds  float64           `json:"seconds"`
	Machine  string            `json:"machine"`
	Go       string            `json:"go"`
	Redis    string            `json:"redis"` // "7.0.15" for Redis, "Valkey 9.1.2" for Valkey (serverLabel)
	Versions map[string]string `json:"versions"`
	Sizes    options           `json:"sizes"`
}

// Row is one figure of the results table: this project's value and the
// peers it is compared with (ratio = redisdelay / peer).
type Row struct {
	Section string   `json:"section"`
	Figure  string   `json:"figure"`
	Unit    string   `json:"unit"`
	Ours    *float64 `json:"redisdelay"`
	Peers   []Peer   `json:"peers,omitempty"`
	Target  string   `json:"target,omitempty"`
	NoRatio bool     `json:"-"` // a ratio would mean nothing (e.g. of minima)
}

// Peer is a compared system's value; nil when it was not measured.
type Peer struct {
	Name  string   `json:"name"`
	Value *float64 `json:"value"`
}

// Run is one measured run with what it cost Redis.
type Run struct {
	Name     string  `json:"name"`
	Messages int     `json:"messages"`
	Seconds  float64 `json:"seconds"`
	Rate     float64 `json:"rate"`
	RedisCPU float64 `json:"redis_cpu_percent"`
	// CPUTime is the server's CPU seconds over the whole run (wall time,
	// not only its measured part), ScriptUsec the time INFO commandstats
	// counts in script calls (EVALSHA, EVAL, FCALL) in it.
	CPUTime    float64       `json:"redis_cpu_seconds"`
	ScriptUsec int64         `json:"script_usec"`
	Commands   []CommandStat `json:"top_commands,omitempty"`
}

// IdleRun is the load on Redis while nothing is published.
type IdleRun struct {
	Name           string        `json:"name"`
	Seconds        float64       `json:"seconds"`
	RedisCPU       float64       `json:"redis_cpu_percent"`
	CallsPerSecond float64       `json:"calls_per_second"`
	Commands       []CommandStat `json:"commands"`
}

// Lateness summarises delivery time minus due time of one delivery run, in
// milliseconds.
type Lateness struct {
	Messages    int     `json:"messages"`
	Delivered   int     `json:"delivered"`
	Duplicates  int     `json:"duplicates"`
	Early       int     `json:"early"`
	PublishRate float64 `json:"publish_rate"`
	Min         float64 `json:"min_ms"`
	P50         float64 `json:"p50_ms"`
	P99         float64 `json:"p99_ms"`
	P999        float64 `json:"p999_ms"`
	Max         float64 `json:"max_ms"`
}

// LatenessRun is the lateness of one system in one delivery scenario.
type LatenessRun struct {
	Scenario string    `json:"scenario"`
	System   string    `json:"system"`
	Lateness *Lateness `json:"lateness"`
}

// Section titles, in table order.
var sectionTitles = map[string]string{
	"1":  "1. Publish throughput (64 goroutines)",
	"2":  "2. Subscribe throughput through a Router (ack-only handler)",
	"3":  "3. End-to-end delayed throughput",
	"4":  "4. Lateness (delivery − due time)",
	"5":  "5. Scheduling rate",
	"6":  "6. Redis memory per waiting message",
	"7":  "7. Scaling with the waiting backlog (one topic grown in one Redis; ratios against the smallest size)",
	"8":  "8. Idle cost",
	"10": "10. Midnight spike: messages due at one instant",
	"11": "11. Topics on one Subscriber and a default go-redis client",
	"12": "12. Groups: fairness across tenants, and what groups cost",
	"13": "13. Cost per delivered message at steady rates (default clients and configs; ratios: redisdelay ÷ peer)",
}

func (r *Report) row(section, figure, unit, target string, ours *float64, peers ...Peer) {
	r.Rows = append(r.Rows, Row{Section: section, Figure: figure, Unit: unit, Ours: ours, Peers: peers, Target: target})
}

func (r *Report) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintln(os.Stderr, "  ERROR:", msg)
	r.Errors = append(r.Errors, msg)
}

func peer(name string, v *float64) Peer { return Peer{Name: name, Value: v} }

// ptr returns a pointer to v, for figures that were measured.
func ptr(v float64) *float64 { return &v }

// markdown renders the results as one table per section, followed by where
// Redis spent its time in the measured runs.
func (r *Report) markdown() string {
	var sb strings.Builder
	m := r.Meta
	fmt.Fprintf(&sb, "Command: `%s` — %s, %.0f s\n\n", m.Command, m.Started.Format("2006-01-02 15:04 MST"), m.Seconds)
	fmt.Fprintf(&sb, "Machine: %s; %s; %s (no persistence, same machine)\n\n", m.Machine, m.Go, serverLabel(m.Redis))
	var mods []string
	for k, v := range m.Versions {
		mods = append(mods, k+" "+v)
	}
	sort.Strings(mods)
	fmt.Fprintf(&sb, "Versions: %s\n\n", strings.Join(mods, ", "))
	sb.WriteString("Ratios are redisdelay ÷ peer (shown when both are positive): above 1 is better for rates, below 1 for lateness, memory and CPU.\n")

	rows := slices.Clone(r.Rows)
	slices.SortStableFunc(rows, func(a, b Row) int { return compareSections(a.Section, b.Section) })
	section := ""
	for _, row := range rows {
		if row.Section != section {
			r.sectionEnd(&sb, section)
			section = row.Section
			fmt.Fprintf(&sb, "\n### %s\n\n", sectionTitles[section])
			sb.WriteString("| figure | unit | redisdelay | peers | ratio | target |\n|---|---|--:|---|---|---|\n")
		}
		var peers, ratios []string
		for _, p := range row.Peers {
			peers = append(peers, p.Name+" "+formatValue(p.Value))
			if !row.NoRatio && row.Ours != nil && p.Value != nil && *row.Ours > 0 && *p.Value > 0 {
				ratios = append(ratios, fmt.Sprintf("%s× %s", formatRatio(*row.Ours / *p.Value), p.Name))
			}
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s |\n", row.Figure, row.Unit, formatValue(row.Ours),
			strings.Join(peers, "<br>"), strings.Join(ratios, "<br>"), row.Target)
	}

	r.sectionEnd(&sb, section)

	sb.WriteString("\n### Where Redis spent its time\n\n")
	sb.WriteString("Redis CPU is the server's CPU time over the run's wall time (100% = one core). Commands: the most expensive ones, calls and µs per message (INFO commandstats).\n\n")
	sb.WriteString("| run | msg/s | Redis CPU | top commands: calls/msg, µs/msg |\n|---|--:|--:|---|\n")
	for _, run := range r.Runs {
		var cmds []string
		for _, c := range run.Commands {
			cmds = append(cmds, fmt.Sprintf("%s %.2f, %.1f", c.Command, c.PerMsg, c.UsecMsg))
		}
		fmt.Fprintf(&sb, "| %s | %s | %.0f%% | %s |\n", run.Name, formatNumber(run.Rate), run.RedisCPU, strings.Join(cmds, "; "))
	}
	if len(r.Idle) > 0 {
		sb.WriteString("\n### Idle load\n\n| run | Redis CPU | calls/s | commands: calls/s |\n|---|--:|--:|---|\n")
		for _, run := range r.Idle {
			var cmds []string
			for _, c := range run.Commands {
				cmds = append(cmds, fmt.Sprintf("%s %s", c.Command, formatNumber(float64(c.Calls)/run.Seconds)))
			}
			fmt.Fprintf(&sb, "| %s | %.2f%% | %s | %s |\n", run.Name, run.RedisCPU, formatNumber(run.CallsPerSecond), strings.Join(cmds, "; "))
		}
	}
	if len(r.Errors) > 0 {
		sb.WriteString("\n### Errors\n\n")
		for _, e := range r.Errors {
			fmt.Fprintf(&sb, "- %s\n", e)
		}
	}
	return sb.String()
}

// write saves results.json, results.md and the charts in dir.
func (r *Report) write(dir, md string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md), 0o644); err != nil {
		return err
	}
	if err := drawChart(filepath.Join(dir, "throughput.png"), "Throughput (msg/s, log scale)", r.throughputGroups()); err != nil {
		return err
	}
	if err := drawChart(filepath.Join(dir, "lateness.png"),
		"Lateness: delivery − due time (ms, log scale; a negative value, early, has no bar)", r.latenessGroups()); err != nil {
		return err
	}
	if err := r.topicCharts(dir); err != nil {
		return err
	}
	if err := r.costCharts(dir); err != nil {
		return err
	}
	return r.backlogCharts(dir)
}

// compareSections orders sections by their number, then by the rest:
// 7, 9, 9b, 10.
func compareSections(a, b string) int {
	num := func(s string) (int, string) {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		n, _ := strconv.Atoi(s[:i])
		return n, s[i:]
	}
	na, ra := num(a)
	nb, rb := num(b)
	if na != nb {
		return na - nb
	}
	return strings.Compare(ra, rb)
}

// sectionEnd writes the tables that follow a section's rows.
func (r *Report) sectionEnd(sb *strings.Builder, section string) {
	switch section {
	case "7":
		r.backlogMarkdown(sb)
	case "12":
		r.groupsMarkdown(sb)
	case "13":
		r.costMarkdown(sb)
	}
}

// backlogMarkdown writes scenario 7's ladder as one table, a row per size.
func (r *Report) backlogMarkdown(sb *strings.Builder) {
	if len(r.Backlog) == 0 && r.BacklogLimit == "" {
		return
	}
	sb.WriteString("\n### 7b. The backlog ladder, step by step\n\n")
	sb.WriteString("Ratios (×) against the smallest size. Memory: used_memory growth of the fills over the backlog, and of this step's fill over the messages it added. " +
		"Promotion cost: script time (INFO commandstats) and Redis CPU per message moved by a Manager alone. Delivery: messages due at one instant, from it to the last ack.\n\n")
	sb.WriteString("Publish: medians of the rounds, to the backlog topic and to a topic with no backlog in the same Redis (the backlog topic × against it in the no-backlog column). " +
		"Far calls: the fill's last calls, from one goroutine, each script run logged by SLOWLOG (a call whose far messages are due in more than 128 minutes is stored in parts); the fill's Redis CPU per call is per script run of its 8-goroutine part.\n\n")
	sb.WriteString("| backlog | used_memory | B/msg (this step) | fill msg/s | publish msg/s | publish, no-backlog topic msg/s | promote msg/s | promotion µs/msg: script, CPU | delivery msg/s | delivery p50 / last, ms | slowest call (fill; measuring) | fill: Redis CPU ms a call | far calls from one goroutine |\n")
	sb.WriteString("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|---|\n")
	var first *BacklogStep
	for _, s := range r.Backlog {
		if first == nil {
			first = s
		}
		ratio := func(v, ref *float64) string {
			if v == nil || s == first || ref == nil || *ref <= 0 {
				return formatValue(v)
			}
			return fmt.Sprintf("%s (%s×)", formatValue(v), formatRatio(*v / *ref))
		}
		delivery := "—"
		if s.Delivery != nil {
			delivery = formatNumber(s.Delivery.P50) + " / " + formatNumber(s.Delivery.Max)
		}
		sameRedis := formatValue(s.EmptyPublishRate)
		if s.PublishRate != nil && s.EmptyPublishRate != nil && *s.EmptyPublishRate > 0 {
			sameRedis = fmt.Sprintf("%s (%s×)", sameRedis, formatRatio(*s.PublishRate / *s.EmptyPublishRate))
		}
		fmt.Fprintf(sb, "| %s | %.2f GB | %s (%s) | %s | %s | %s | %s | %.2f, %.2f | %s | %s | %s; %s | %s | %s |\n",
			count(s.Size), float64(s.UsedMemory)/1e9, formatNumber(s.BytesPerMsg), formatNumber(s.StepBytesPerMsg),
			formatNumber(s.FillRate), ratio(s.PublishRate, first.PublishRate), sameRedis, ratio(s.PromoteRate, first.PromoteRate),
			s.PromoteScriptUsec, s.PromoteCPUUsec, ratio(s.DeliveryRate, first.DeliveryRate), delivery, s.FillSlowest, s.Slowest,
			formatNumber(s.FillCPUMsPerCall), s.FarCalls)
	}
	if r.BacklogLimit != "" {
		fmt.Fprintf(sb, "\nThe ladder stopped: %s.\n", r.BacklogLimit)
	}
}

// backlogCharts draws scenario 7's rates, memory and promotion cost
// against the backlog size, on linear axes.
func (r *Report) backlogCharts(dir string) error {
	if len(r.Backlog) == 0 {
		return nil
	}
	var rates, memory, cost []barGroup
	value := func(v *float64) float64 {
		if v == nil {
			return 0
		}
		return *v
	}
	for _, s := range r.Backlog {
		label := "backlog " + count(s.Size)
		rates = append(rates, barGroup{label: label, bars: []bar{
			{"publish delayed, 500 per call × 8", value(s.PublishRate)},
			{"publish delayed, to a topic with no backlog", value(s.EmptyPublishRate)},
			{"promote, Manager alone", value(s.PromoteRate)},
			{"due delivery, due time to last ack", value(s.DeliveryRate)},
		}})
		memory = append(memory, barGroup{label: label, bars: []bar{
			{"whole backlog", s.BytesPerMsg},
			{"this step's fill", s.StepBytesPerMsg},
		}})
		cost = append(cost, barGroup{label: label, bars: []bar{
			{"script time (commandstats)", s.PromoteScriptUsec},
			{"Redis CPU", s.PromoteCPUUsec},
		}})
	}
	return drawLinearCharts(dir, []namedChart{
		{"backlog-rates.png", "Rates against the waiting backlog (msg/s)", rates},
		{"backlog-memory.png", "Redis memory per waiting 100 B message (bytes, used_memory growth)", memory},
		{"backlog-promotion.png", "Promotion cost in Redis per message moved (µs)", cost},
	})
}

// namedChart is a chart and the file it goes to.
type namedChart struct {
	file, title string
	groups      []barGroup
}

// drawLinearCharts draws charts on linear axes into dir.
func drawLinearCharts(dir string, charts []namedChart) error {
	for _, c := range charts {
		if err := drawLinearChart(filepath.Join(dir, c.file), c.title, c.groups); err != nil {
			return err
		}
	}
	return nil
}

// throughputGroups charts every rate of the table: one group per figure.
func (r *Report) throughputGroups() []barGroup {
	var groups []barGroup
	for _, row := range r.Rows {
		if row.Unit != "msg/s" {
			continue
		}
		g := barGroup{label: row.Figure}
		if row.Ours != nil {
			g.bars = append(g.bars, bar{sysRedisdelay, *row.Ours})
		}
		for _, p := range row.Peers {
			if p.Value != nil {
				g.bars = append(g.bars, bar{p.Name, *p.Value})
			}
		}
		groups = append(groups, g)
	}
	return groups
}

// latenessGroups charts the percentiles of every delivery run, the systems
// of one scenario side by side.
func (r *Report) latenessGroups() []barGroup {
	order := map[string]int{}
	for _, l := range r.Lateness {
		if _, ok := order[l.Scenario]; !ok {
			order[l.Scenario] = len(order)
		}
	}
	runs := slices.Clone(r.Lateness)
	slices.SortStableFunc(runs, func(a, b LatenessRun) int { return order[a.Scenario] - order[b.Scenario] })
	var groups []barGroup
	for _, l := range runs {
		s := l.Lateness
		groups = append(groups, barGroup{label: l.Scenario + " · " + l.System, bars: []bar{
			{"p50", s.P50}, {"p99", s.P99}, {"p99.9", s.P999}, {"max", s.Max},
		}})
	}
	return groups
}

func formatValue(v *float64) string {
	if v == nil {
		return "—"
	}
	return formatNumber(*v)
}

// formatNumber prints large values with thousands separators and small ones
// with three significant digits.
func formatNumber(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1000:
		s := fmt.Sprintf("%.0f", a)
		var out []byte
		for i := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				out = append(out, ',')
			}
			out = append(out, s[i])
		}
		if v < 0 {
			return "-" + string(out)
		}
		return string(out)
	case a >= 100 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// formatRatio prints ratios below 0.01 as fractions: 1/250.
func formatRatio(r float64) string {
	switch {
	case r >= 10:
		return fmt.Sprintf("%.0f", r)
	case r >= 0.1:
		return fmt.Sprintf("%.2f", r)
	case r >= 0.01:
		return fmt.Sprintf("%.3f", r)
	}
	return "1/" + formatNumber(1/r)
}

// serverLabel names the server of a report's meta.redis: a bare version is
// Redis's (reports written before Valkey was tested have only those), a
// Valkey server's says so (redisServer.version).
func serverLabel(version string) string {
	if strings.HasPrefix(version, "Valkey ") {
		return version
	}
	return "Redis " + version
}

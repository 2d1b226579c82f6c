package redistest

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ScriptCPUGuard is what the script-bound tests (the root package's and
// internal/store's) assert of every script call they measure with
// ScriptCPU: the server's CPU time over the call stays under it. Generous:
// the bounded calls took 1-27 ms of CPU (own.lua claiming 1,000 entries
// 7-9 ms, promote calls up to 27 ms), the unbounded ones it guards against
// 0.75-1.6 s (measured with the bounds taken out: a pending list of
// 300,000 claimed by one own.lua call, 1.62 s; 256 high-priority messages
// copied to 1,000 groups' streams in one promote call, 0.75 s).
//
// It bounds CPU time, not wall-clock time: SLOWLOG's durations count the
// time Redis waited for a core, so on the shared 2-core test machine an
// own.lua call of 19 ms took 1.54 s by SLOWLOG once, under heavy load,
// failing the 500 ms wall-clock bound of that time. A call's CPU time
// stays near its quiet figure under load (a Lua loop of 20-25 ms of CPU
// alone took 42-80 ms by SLOWLOG beside four busy loops, at 19-25 ms of
// CPU); time the vCPU was stolen by the host is not counted either
// (steal time accounting).
const ScriptCPUGuard = 250 * time.Millisecond

// ScriptCall is a script call that a ScriptCPU measured: an EVAL or
// EVALSHA, or a pipeline holding some.
type ScriptCall struct {
	Scripts []string      // the SHA1s of its scripts, in order
	Key     string        // the first key of the first script
	CPU     time.Duration // CPU time of the server's main thread over the call
	Wall    time.Duration // the call's round trip, as the client saw it
}

func (c ScriptCall) String() string {
	shas := make([]string, len(c.Scripts))
	for i, s := range c.Scripts {
		shas[i] = s[:min(len(s), 8)]
	}
	return fmt.Sprintf("%s of CPU (%s round trip): %s %s", c.CPU, c.Wall.Round(time.Microsecond), strings.Join(shas, "+"), c.Key)
}

// ScriptCPU measures the work of a client's script calls: while it
// records, a hook on the client sends each call (an EVAL or EVALSHA, or a
// pipeline holding some) between two INFO cpu commands in one pipeline on
// the same connection, which the server runs one after the other (unless
// the pipeline arrives in several reads), so the difference of the two
// readings of its main thread's CPU time is what it spent on the call.
// Time the server spent waiting for a core does not count, as it does in
// SLOWLOG. (A MULTI/EXEC pipeline is measured with INFO on a connection of
// its own instead, so other clients' commands run meanwhile count too.)
// For a single server (not a Cluster: INFO of one node).
type ScriptCPU struct {
	client *redis.Client
	info   *redis.Client

	mu    sync.Mutex
	on    bool
	calls []ScriptCall
}

// NewScriptCPU adds the hook to c and starts recording. Close it before c
// (the hook then measures nothing more).
func NewScriptCPU(c *redis.Client) *ScriptCPU {
	// The measuring connection (INFO around a MULTI/EXEC) is not the client
	// under test: a small pool of its own keeps it from taking that
	// client's connections or adding many to the server.
	o := *c.Options()
	o.PoolSize = 2
	o.MinIdleConns = 0
	o.ClientName = "scriptcpu"
	s := &ScriptCPU{client: c, info: redis.NewClient(&o), on: true}
	c.AddHook(scriptHook{s})
	return s
}

// Close stops recording and closes the INFO connection.
func (s *ScriptCPU) Close() error {
	s.Record(false)
	return s.info.Close()
}

// Record turns recording on or off.
func (s *ScriptCPU) Record(on bool) {
	s.mu.Lock()
	s.on = on
	s.mu.Unlock()
}

// Take returns the calls recorded since the last Take.
func (s *ScriptCPU) Take() []ScriptCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	calls := s.calls
	s.calls = nil
	return calls
}

// Worst is the call of the most CPU time among calls (zero if none).
func Worst(calls []ScriptCall) ScriptCall {
	var w ScriptCall
	for _, c := range calls {
		if c.CPU > w.CPU {
			w = c
		}
	}
	return w
}

func (s *ScriptCPU) recording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.on
}

func (s *ScriptCPU) add(c ScriptCall) {
	s.mu.Lock()
	if s.on {
		s.calls = append(s.calls, c)
	}
	s.mu.Unlock()
}

// cpuTime is the main thread's CPU time in an INFO cpu reply (the whole
// process's, of a server that does not report its main thread's).
func cpuTime(info string) (time.Duration, error) {
	fields := map[string]float64{}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			fields[k] = f
		}
	}
	user, ok1 := fields["used_cpu_user_main_thread"]
	sys, ok2 := fields["used_cpu_sys_main_thread"]
	if !ok1 || !ok2 {
		user, ok1 = fields["used_cpu_user"]
		sys, ok2 = fields["used_cpu_sys"]
	}
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("no CPU time in INFO cpu: %q", info)
	}
	return time.Duration((user + sys) * float64(time.Second)), nil
}

// scripts is the call of cmds' scripts, if any, not yet measured.
func scripts(cmds []redis.Cmder) (ScriptCall, bool) {
	var c ScriptCall
	for _, cmd := range cmds {
		sha, key, ok := scriptOf(cmd)
		if !ok {
			continue
		}
		if c.Scripts == nil {
			c.Key = key
		}
		c.Scripts = append(c.Scripts, sha)
	}
	return c, c.Scripts != nil
}

// scriptOf tells whether cmd runs a script: its SHA1 and first key.
func scriptOf(cmd redis.Cmder) (sha, key string, ok bool) {
	args := cmd.Args()
	if len(args) < 3 {
		return "", "", false
	}
	name, _ := args[0].(string)
	src := fmt.Sprint(args[1])
	switch strings.ToLower(name) {
	case "evalsha", "evalsha_ro":
		sha = strings.ToLower(src)
	case "eval", "eval_ro":
		sum := sha1.Sum([]byte(src))
		sha = hex.EncodeToString(sum[:])
	default:
		return "", "", false
	}
	if n, _ := strconv.Atoi(fmt.Sprint(args[2])); n > 0 && len(args) > 3 {
		key = fmt.Sprint(args[3])
	}
	return sha, key, true
}

// bracketed runs cmds through run with an INFO cpu before and after them,
// and records the call c if both readings came.
func (s *ScriptCPU) bracketed(ctx context.Context, c ScriptCall, cmds []redis.Cmder, run func([]redis.Cmder) error) error {
	before, after := redis.NewStringCmd(ctx, "info", "cpu"), redis.NewStringCmd(ctx, "info", "cpu")
	all := make([]redis.Cmder, 0, len(cmds)+2)
	all = append(append(append(all, before), cmds...), after)
	start := time.Now()
	err := run(all)
	c.Wall = time.Since(start)
	b, err1 := cpuTime(before.Val())
	a, err2 := cpuTime(after.Val())
	if before.Err() == nil && after.Err() == nil && err1 == nil && err2 == nil {
		c.CPU = a - b
		s.add(c)
	}
	return err
}

// outside runs call between two readings of INFO cpu on a connection of
// their own, and records the call c if both came.
func (s *ScriptCPU) outside(c ScriptCall, call func() error) error {
	read := func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		info, err := s.info.Info(ctx, "cpu").Result()
		if err != nil {
			return 0, err
		}
		return cpuTime(info)
	}
	b, err := read()
	if err != nil {
		return call()
	}
	start := time.Now()
	callErr := call()
	c.Wall = time.Since(start)
	if a, err := read(); err == nil {
		c.CPU = a - b
		s.add(c)
	}
	return callErr
}

// unhooked marks the context of the hook's own pipeline.
type unhooked struct{}

type scriptHook struct{ s *ScriptCPU }

func (h scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c, ok := scripts([]redis.Cmder{cmd})
		if !ok || !h.s.recording() {
			return next(ctx, cmd)
		}
		return h.s.bracketed(ctx, c, []redis.Cmder{cmd}, func(all []redis.Cmder) error {
			pipe := h.s.client.Pipeline()
			for _, cmd := range all {
				_ = pipe.Process(ctx, cmd)
			}
			_, _ = pipe.Exec(context.WithValue(ctx, unhooked{}, true))
			return cmd.Err()
		})
	}
}

func (h scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(unhooked{}) != nil {
			return next(ctx, cmds)
		}
		c, ok := scripts(cmds)
		if !ok || !h.s.recording() {
			return next(ctx, cmds)
		}
		if len(cmds) > 0 && cmds[0].Name() == "multi" {
			return h.s.outside(c, func() error { return next(ctx, cmds) })
		}
		return h.s.bracketed(ctx, c, cmds, func(all []redis.Cmder) error { return next(ctx, all) })
	}
}

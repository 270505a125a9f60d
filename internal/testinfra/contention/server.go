package contention

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServerCost is what a redis-server did between two Snapshots, from INFO:
// how many commands it ran, the time it spent inside them, and its process
// CPU time. A script's inner commands count inside EVALSHA and again on
// their own, as INFO commandstats reports them; every lock measured this
// way is counted alike.
type ServerCost struct {
	Calls  int64            // commands run
	Usec   int64            // µs spent inside them (commandstats usec)
	CPU    time.Duration    // redis-server's user + system CPU time
	ByName map[string]int64 // calls per command
	UsecBy map[string]int64 // µs per command
}

// Snapshot reads the server's counters through c. Commands the
// measurement itself sends (INFO) are left out.
func Snapshot(ctx context.Context, c *redis.Client) (ServerCost, error) {
	info, err := c.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return ServerCost{}, err
	}
	s := ServerCost{ByName: map[string]int64{}, UsecBy: map[string]int64{}}
	var cpu float64
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		if name, rest, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(name, "cmdstat_") {
			name = strings.TrimPrefix(name, "cmdstat_")
			if name == "info" {
				continue
			}
			calls, usec := statField(rest, "calls"), statField(rest, "usec")
			s.Calls += calls
			s.Usec += usec
			s.ByName[name] = calls
			s.UsecBy[name] = usec
			continue
		}
		if name, v, ok := strings.Cut(line, ":"); ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		}
	}
	s.CPU = time.Duration(cpu * float64(time.Second))
	return s, nil
}

// statField reads one "name=value" field of a commandstats line.
func statField(fields, name string) int64 {
	for f := range strings.SplitSeq(fields, ",") {
		if k, v, ok := strings.Cut(f, "="); ok && k == name {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// Sub is the cost between an earlier snapshot and s.
func (s ServerCost) Sub(earlier ServerCost) ServerCost {
	d := ServerCost{Calls: s.Calls - earlier.Calls, Usec: s.Usec - earlier.Usec, CPU: s.CPU - earlier.CPU,
		ByName: map[string]int64{}, UsecBy: map[string]int64{}}
	for name, n := range s.ByName {
		if n -= earlier.ByName[name]; n != 0 {
			d.ByName[name] = n
			d.UsecBy[name] = s.UsecBy[name] - earlier.UsecBy[name]
		}
	}
	return d
}

// Report adds the cost per operation, for ops operations, to b's output:
// commands, µs inside Redis commands, and redis-server CPU µs; and logs
// the commands, and the µs inside them, by name.
func (s ServerCost) Report(b *testing.B, ops int) {
	n := float64(ops)
	b.ReportMetric(float64(s.Calls)/n, "cmds/op")
	b.ReportMetric(float64(s.Usec)/n, "redis-µs/op")
	b.ReportMetric(float64(s.CPU.Microseconds())/n, "cpu-µs/op")
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(s.ByName)) {
		parts = append(parts, fmt.Sprintf("%s×%.2f (%.2f µs)", name, float64(s.ByName[name])/n, float64(s.UsecBy[name])/n))
	}
	b.Logf("commands per op over %d ops (µs inside each, per op): %s", ops, strings.Join(parts, " "))
}

// MeasureServer snapshots the server behind c now; the returned function
// reports the cost per operation since then (see ServerCost.Report).
func MeasureServer(b *testing.B, c *redis.Client) (report func(ops int)) {
	b.Helper()
	ctx := context.Background()
	before, err := Snapshot(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	return func(ops int) {
		b.Helper()
		after, err := Snapshot(ctx, c)
		if err != nil {
			b.Fatal(err)
		}
		after.Sub(before).Report(b, ops)
	}
}

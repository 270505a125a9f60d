package lock

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/seckill-ref/seckill/internal/testinfra/redistest"
	"github.com/seckill-ref/seckill/lock/internal/core"
	"github.com/seckill-ref/seckill/lock/internal/queue"
)

// The key layout's guarantees, checked for any name and prefix the Locker
// accepts: all the keys of one lock hash to one Redis Cluster slot, the
// slot of the name itself, so that one script can touch them together;
// and two different names never share a key, so two locks never interfere.

// crc16 is the CRC-16/XMODEM checksum Redis Cluster hashes keys with
// (polynomial 0x1021, initial value 0).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// keySlot is Redis Cluster's slot of key: the CRC of its hash tag, the
// part between the first '{' and the first '}' after it, when that part is
// not empty; of the whole key otherwise.
func keySlot(key string) uint16 {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	return crc16(key) & 16383
}

// allKeys lists every name a lock uses in Redis for one ticket: each
// string field of queue.Keys and of the core.Keys in it, but the lock's
// name (read by reflection, so that a key added to the layout is checked
// too), and the ticket's tombstone.
func allKeys(k queue.Keys, ticket string) []string {
	var out []string
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		for i := range v.NumField() {
			switch f := v.Field(i); {
			case f.Kind() == reflect.Struct:
				walk(f)
			case f.Kind() == reflect.String && v.Type().Field(i).Name != "Name":
				out = append(out, f.String())
			}
		}
	}
	walk(reflect.ValueOf(k))
	return append(out, k.Tombstone(ticket))
}

// checkLayout reports the first way in which layout, the keys of a name,
// breaks a guarantee for the different names a and b, or "".
func checkLayout(layout func(name string) []string, a, b string) string {
	ka, kb := layout(a), layout(b)
	for _, key := range ka {
		if s := keySlot(key); s != keySlot("{"+a+"}") {
			return "key " + key + " of " + a + " is in another slot than the name"
		}
	}
	mine := map[string]bool{}
	for _, key := range ka {
		mine[key] = true
	}
	for _, key := range kb {
		if mine[key] {
			return "names " + a + " and " + b + " share the key " + key
		}
	}
	return ""
}

// accepted reports whether a Locker takes prefix and name, and returns
// the prefix it would use.
func accepted(prefix, name string) (string, bool) {
	opts, err := Options{Prefix: prefix}.withDefaults(false)
	return opts.Prefix, err == nil && core.CheckName(name) == nil
}

// ticketOf makes a ticket, which is a UUID, of the first 16 bytes of b.
func ticketOf(b []byte) string {
	var u uuid.UUID
	copy(u[:], b)
	return u.String()
}

// FuzzKeyLayout: for any prefix and two different names that a Locker
// accepts, and any tickets, every key of each name (lock, fence, queue,
// waiters, the channel, the ticket's tombstone) is in the name's Cluster
// slot, and the two names share no key.
func FuzzKeyLayout(f *testing.F) {
	for _, seed := range []struct{ prefix, a, b string }{
		{"", "product:1", "product:2"},
		{"", "a", "a}"},
		{"", "a", "{a}"},
		{"", "", "x"},
		{"", "x:fence", "x"},
		{"", "a}:fence", "a"},
		{"lock:", "a", "a:fence"},
		{"app{", "a", "b"},
		{"app}", "a", "b"},
		{"{}", "a", "b"},
		{"p", "\xff", "\u00ff"},
		{"", "a:tombstone:00000000-0000-0000-0000-000000000000", "a"},
	} {
		f.Add(seed.prefix, seed.a, seed.b, []byte("ticket-a........"), []byte("ticket-b........"))
	}
	f.Fuzz(func(t *testing.T, prefix, a, b string, ta, tb []byte) {
		pa, okA := accepted(prefix, a)
		_, okB := accepted(prefix, b)
		if !okA || !okB || a == b {
			return
		}
		ticket := map[string]string{a: ticketOf(ta), b: ticketOf(tb)}
		layout := func(name string) []string { return allKeys(queue.NewKeys(pa, name), ticket[name]) }
		if msg := checkLayout(layout, a, b); msg != "" {
			t.Fatalf("prefix %q: %s", pa, msg)
		}
		if msg := checkLayout(layout, b, a); msg != "" {
			t.Fatalf("prefix %q: %s", pa, msg)
		}
	})
}

// TestKeyLayoutCheckCatchesBrokenLayouts: the check above fails for
// layouts that break each guarantee, so the fuzz target can find them.
func TestKeyLayoutCheckCatchesBrokenLayouts(t *testing.T) {
	t.Parallel()
	// Two names in one slot, for a layout that keeps every key in its
	// name's slot but shares one between the names.
	a, b := "n0", ""
	for i := 1; b == ""; i++ {
		if n := "n" + strconv.Itoa(i); keySlot(n) == keySlot(a) {
			b = n
		}
	}
	for _, tt := range []struct {
		name   string
		layout func(name string) []string
		want   string // in the check's report
	}{
		{"no hash tag", func(n string) []string { return []string{"lock:" + n, "lock:" + n + ":fence"} }, "another slot"},
		{"the name outside the tag", func(n string) []string { return []string{"lock:{x}" + n, "lock:{x}" + n + ":fence"} }, "another slot"},
		{"a key shared within a slot", func(n string) []string { return []string{"lock:{" + n + "}", "lock:{" + a + "}:fence"} }, "share"},
	} {
		if got := checkLayout(tt.layout, b, a); !strings.Contains(got, tt.want) {
			t.Errorf("%s, names %q and %q: the check reported %q, want %q", tt.name, b, a, got, tt.want)
		}
	}
}

// TestKeySlotMatchesRedis compares keySlot with CLUSTER KEYSLOT of a real
// redis-server in cluster mode, on keys with every kind of hash tag.
func TestKeySlotMatchesRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", t.TempDir()+"/nodes.conf")
	c := srv.Client()
	for _, key := range []string{
		"", "foo", "123456789", "lock:{product:1}", "lock:{product:1}:fence", "{}", "{}x", "a{}b{c}",
		"{a}{b}", "a{b", "}a{b}", "{{a}}", "lock:{\xff}", "lock:{é}:queue", strings.Repeat("k", 300),
	} {
		want, err := c.ClusterKeySlot(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := keySlot(key); int64(got) != want {
			t.Errorf("slot of %q: got %d, Redis says %d", key, got, want)
		}
	}
	if got := crc16("123456789"); got != 0x31C3 {
		t.Errorf("crc16(123456789): got %#x, want 0x31c3 (the Cluster specification's test vector)", got)
	}
}

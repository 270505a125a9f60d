package core

import (
	"fmt"
	"strings"
)

// Keys are the Redis keys of one lock. Each carries the lock's name as a
// hash tag, {name}, so that in Redis Cluster they live in one slot and one
// script may touch them together (a script's keys must share a slot).
type Keys struct {
	Name  string // the lock's name, as the caller gave it
	Lock  string // the owner's UUID, with the lease as its TTL
	Fence string // the last fencing token issued (lua/token.lua)
}

// NewKeys returns the keys of the lock called name under prefix.
func NewKeys(prefix, name string) Keys {
	lock := prefix + "{" + name + "}"
	return Keys{Name: name, Lock: lock, Fence: lock + ":fence"}
}

// Tombstone is the key that marks owner abandoned, so that an acquire
// carrying it that arrives late fails (lua/abandon.lua). Only the process
// that made the owner reads or writes it, so its name may change between
// versions; the other keys are shared by every process that locks the
// name, and keep theirs.
func (k Keys) Tombstone(owner string) string { return k.Lock + ":tombstone:" + owner }

// CheckName refuses a name that would break the hash tag: an empty tag, or
// one cut short by a brace, would spread a lock's keys over several
// Cluster slots.
func CheckName(name string) error {
	if name == "" || strings.ContainsAny(name, "{}") {
		return fmt.Errorf("lock: invalid name %q: it must be non-empty and must not contain '{' or '}'", name)
	}
	return nil
}

package core

import (
	"fmt"
	"strings"
)

// Keys are the Redis names one lock uses. All of them carry the lock's
// name as a hash tag, {name}, so in Redis Cluster they live in one slot and
// one script can touch them together. The channel is not a key, but
// follows the same scheme.
type Keys struct {
	Name    string // the lock's name, as the caller gave it
	Lock    string // the owner's UUID; its TTL is the lease
	Fence   string // the last fencing token issued
	Queue   string // processes waiting, oldest first
	Waiters string // each waiting process's entry: expiry, lease, ticket
	Channel string // grants to waiting processes are published here

	channelArg any // Channel as a script argument, converted once
}

// NewKeys returns the keys of the lock called name under prefix.
func NewKeys(prefix, name string) Keys {
	base := prefix + "{" + name + "}"
	k := Keys{Name: name, Lock: base, Fence: base + ":fence", Queue: base + ":queue",
		Waiters: base + ":waiters", Channel: base + ":grant"}
	k.channelArg = k.Channel
	return k
}

// ForTicket is the KEYS list the scripts take, in the order common.lua
// names them; the last is the tombstone of ticket.
func (k Keys) ForTicket(ticket string) []string {
	return []string{k.Lock, k.Fence, k.Queue, k.Waiters, k.Tombstone(ticket)}
}

// Tombstone is the key that marks ticket withdrawn, so that a late request
// carrying it fails. Only the process that owns the ticket writes or reads
// it, so its name may change between versions; the other keys are shared
// by every process that locks the name, and keep theirs.
func (k Keys) Tombstone(ticket string) string { return k.Lock + ":tombstone:" + ticket }

// CheckName refuses names that would break the hash tag: an empty tag, or
// one cut short, would spread a lock's keys over several Cluster slots.
func CheckName(name string) error {
	if name == "" || strings.ContainsAny(name, "{}") {
		return fmt.Errorf("lock: invalid name %q: it must be non-empty and must not contain '{' or '}'", name)
	}
	return nil
}

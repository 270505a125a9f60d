package lock

// keys are the Redis names one lock uses. All of them carry the lock's name
// as a hash tag, {name}, so in Redis Cluster they live in one slot and one
// script can touch them together. The channel is not a key, but follows the
// same scheme.
type keys struct {
	lock    string // the owner's UUID; its TTL is the lease
	fence   string // the last fencing token issued; expires Options.FenceTTL after it
	queue   string // processes waiting, oldest first
	waiters string // each waiting process's entry: expiry, lease, ticket
	channel string // grants to waiting processes are published here

	channelArg any // channel as a script argument, converted once
}

func newKeys(prefix, name string) keys {
	base := prefix + "{" + name + "}"
	k := keys{
		lock:    base,
		fence:   base + ":fence",
		queue:   base + ":queue",
		waiters: base + ":waiters",
		channel: base + ":grant",
	}
	k.channelArg = k.channel
	return k
}

// forTicket is the KEYS list the scripts take, in the order common.lua names
// them; the last is the tombstone of ticket, which withdraw writes, and
// acquire and release (for the ticket it would queue) refuse.
func (k keys) forTicket(ticket string) []string {
	return []string{k.lock, k.fence, k.queue, k.waiters, k.tombstone(ticket)}
}

// tombstone is the key that marks ticket withdrawn, so that a late request
// carrying it fails. Only the process that owns the ticket writes or reads
// it, so its name can change from one version to the next without a
// migration; the other keys are shared by every process that locks the
// name, and keep theirs.
func (k keys) tombstone(ticket string) string { return k.lock + ":tombstone:" + ticket }

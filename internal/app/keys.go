package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/seckill-ref/seckill/handlers"
	"github.com/seckill-ref/seckill/store"
)

var _ handlers.IdempotencyStore = (*store.Store)(nil)

// keySweepBatch is the most idempotency keys one statement deletes: a
// short write, which on SQLite holds the file's one write lock only
// briefly between purchases.
const keySweepBatch = 1000

// sweepKeys deletes expired idempotency keys every cfg.KeySweepEvery until
// ctx ends: the keys first used more than IdempotencyTTL ago, except those
// whose attempt may still be running (in flight within the HTTP write
// timeout, the in-flight limit). Every replica runs one; two deleting at
// once delete each key once. A sweep deletes in batches until a batch
// comes back short; a failed one is logged, and the next tries again.
func sweepKeys(ctx context.Context, st *store.Store, cfg Config, log *slog.Logger) {
	t := time.NewTicker(cfg.KeySweepEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for {
			now := time.Now()
			n, err := st.ExpireKeys(ctx, now.Add(-cfg.IdempotencyTTL), now.Add(-cfg.HTTPWriteTimeout()), keySweepBatch)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("idempotency keys: sweep", "err", err)
				}
				break
			}
			if n < keySweepBatch {
				break
			}
		}
	}
}

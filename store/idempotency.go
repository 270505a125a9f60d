package store

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-ref/seckill/internal/seckill"
)

// The records of idempotency keys (seckill.KeyClaim): one row per user and
// key, in the database every replica shares, so that a retry that reaches
// another replica than its first attempt finds the key. A row is in flight
// from its claim to its answer, then done; it is deleted when the attempt
// gives its key back (ReleaseKey), or once it has expired (ExpireKeys).
//
// The primary key decides between two first attempts that claim a key at
// once: both insert, one row is written, and the other attempt finds it.
// Every change of a claimed row names its attempt (WHERE attempt = ?), so
// that an attempt whose key was taken over changes nothing.

// keyRow is the idempotency_keys table.
type keyRow struct {
	UserID      string    `gorm:"primaryKey;size:64"`
	IdemKey     string    `gorm:"primaryKey;size:255"` // not "key", a keyword in some SQL
	Fingerprint string    `gorm:"not null;size:64"`
	State       string    `gorm:"not null;size:16"` // keyInFlight or keyDone
	Attempt     string    `gorm:"not null;size:32"`
	CreatedAt   time.Time `gorm:"not null;index:idx_idempotency_keys_created"` // the first claim: the key expires from here
	ClaimedAt   time.Time `gorm:"not null"`                                    // the last claim, moved by a takeover
	Status      int       `gorm:"not null;default:0"`
	Header      string    `gorm:"not null;default:''"` // JSON object of the kept headers
	Body        []byte
}

func (keyRow) TableName() string { return "idempotency_keys" }

// The states of a row.
const (
	keyInFlight = "in_flight"
	keyDone     = "done"
)

// ClaimKey claims c's key for an attempt of its request, in one
// transaction: it inserts the row in flight if there is none (KeyClaimed);
// otherwise it reads it and answers KeyReused when its fingerprint is not
// c's, KeyReplay with the answer when it is done, KeyInFlight when it was
// claimed at or after c.StaleBefore, and else takes it over for a new
// attempt (KeyTakenOver), keeping its CreatedAt. On PostgreSQL a row can
// change between the read and the takeover (answered, released, taken over
// by another retry): the takeover then matches nothing, and the claim
// starts again.
func (s *Store) ClaimKey(ctx context.Context, c seckill.KeyClaim) (seckill.KeyRecord, error) {
	var rec seckill.KeyRecord
	attempt := rand.Text()
	at := c.At.UTC()
	err := s.transaction(ctx, func(tx *gorm.DB) error {
		for range 3 {
			res := tx.Exec(`INSERT INTO idempotency_keys (user_id, idem_key, fingerprint, state, attempt, created_at, claimed_at)
				VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (user_id, idem_key) DO NOTHING`,
				c.UserID, c.Key, c.Fingerprint, keyInFlight, attempt, at, at)
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected == 1 {
				rec = seckill.KeyRecord{State: seckill.KeyClaimed, Attempt: attempt}
				return nil
			}
			var rows []keyRow
			if err := tx.Where("user_id = ? AND idem_key = ?", c.UserID, c.Key).Limit(1).Find(&rows).Error; err != nil {
				return err
			}
			if len(rows) == 0 {
				continue // released since the insert: claim it again
			}
			r := rows[0]
			switch {
			case r.Fingerprint != c.Fingerprint:
				rec = seckill.KeyRecord{State: seckill.KeyReused}
				return nil
			case r.State == keyDone:
				reply, err := r.reply()
				rec = seckill.KeyRecord{State: seckill.KeyReplay, Reply: reply}
				return err
			case !r.ClaimedAt.Before(c.StaleBefore):
				rec = seckill.KeyRecord{State: seckill.KeyInFlight}
				return nil
			}
			res = tx.Exec("UPDATE idempotency_keys SET attempt = ?, claimed_at = ? WHERE user_id = ? AND idem_key = ? AND state = ? AND attempt = ?",
				attempt, at, c.UserID, c.Key, keyInFlight, r.Attempt)
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected == 1 {
				rec = seckill.KeyRecord{State: seckill.KeyTakenOver, Attempt: attempt}
				return nil
			}
		}
		return errors.New("the key's row kept changing under the claim")
	})
	if err != nil {
		return seckill.KeyRecord{}, fmt.Errorf("store: claim idempotency key %q of user %q: %w", c.Key, c.UserID, err)
	}
	return rec, nil
}

// CompleteKey records r as the answer of the request k names, if attempt
// still holds k; otherwise it changes nothing and returns an error matching
// seckill.ErrKeyLost.
func (s *Store) CompleteKey(ctx context.Context, k seckill.RequestKey, attempt string, r seckill.Reply) error {
	header, err := json.Marshal(r.Header)
	if err != nil {
		return fmt.Errorf("store: record the answer under idempotency key %q of user %q: %w", k.Key, k.UserID, err)
	}
	body := r.Body
	if body == nil {
		body = []byte{} // an empty answer, not a missing one
	}
	n, err := s.exec(ctx, "UPDATE idempotency_keys SET state = ?, status = ?, header = ?, body = ? WHERE user_id = ? AND idem_key = ? AND state = ? AND attempt = ?",
		keyDone, r.Status, string(header), body, k.UserID, k.Key, keyInFlight, attempt)
	return keyWritten("record the answer under", k, n, err)
}

// ReleaseKey deletes the claim of k by attempt, so that a retry runs the
// request again, if attempt still holds k; otherwise it changes nothing and
// returns an error matching seckill.ErrKeyLost.
func (s *Store) ReleaseKey(ctx context.Context, k seckill.RequestKey, attempt string) error {
	n, err := s.exec(ctx, "DELETE FROM idempotency_keys WHERE user_id = ? AND idem_key = ? AND state = ? AND attempt = ?",
		k.UserID, k.Key, keyInFlight, attempt)
	return keyWritten("release", k, n, err)
}

// keyWritten is the error of a write to one claimed key's row.
func keyWritten(what string, k seckill.RequestKey, n int64, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("store: %s idempotency key %q of user %q: %w", what, k.Key, k.UserID, err)
	case n == 0:
		return fmt.Errorf("store: %s idempotency key %q of user %q: %w", what, k.Key, k.UserID, seckill.ErrKeyLost)
	}
	return nil
}

// ExpireKeys deletes up to limit keys first claimed before createdBefore,
// in one statement, and returns how many it deleted. A key still in flight
// is deleted only if its last claim was before staleBefore too, so that an
// attempt that may still be running keeps its key.
func (s *Store) ExpireKeys(ctx context.Context, createdBefore, staleBefore time.Time, limit int) (int64, error) {
	n, err := s.exec(ctx, `DELETE FROM idempotency_keys WHERE (user_id, idem_key) IN (
		SELECT user_id, idem_key FROM idempotency_keys WHERE created_at < ? AND (state = ? OR claimed_at < ?) LIMIT ?)`,
		createdBefore.UTC(), keyDone, staleBefore.UTC(), limit)
	if err != nil {
		return 0, fmt.Errorf("store: expire idempotency keys: %w", err)
	}
	return n, nil
}

// reply is the answer a done row keeps.
func (r keyRow) reply() (seckill.Reply, error) {
	out := seckill.Reply{Status: r.Status, Body: r.Body}
	if err := json.Unmarshal([]byte(r.Header), &out.Header); err != nil {
		return seckill.Reply{}, fmt.Errorf("read the kept headers %q: %w", r.Header, err)
	}
	return out, nil
}

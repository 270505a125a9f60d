package seckill_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/seckill-ref/seckill/internal/seckill"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		err   error
		field string // "" when valid
	}{
		{"name ok", seckill.ValidateName("phone"), ""},
		{"name 200 runes", seckill.ValidateName(strings.Repeat("é", 200)), ""},
		{"name empty", seckill.ValidateName(""), "name"},
		{"name 201", seckill.ValidateName(strings.Repeat("a", 201)), "name"},
		{"name bad utf8", seckill.ValidateName("\xff"), "name"},
		{"stock 0", seckill.ValidateStock(0), ""},
		{"stock max", seckill.ValidateStock(seckill.MaxStock), ""},
		{"stock -1", seckill.ValidateStock(-1), "stock"},
		{"stock max+1", seckill.ValidateStock(seckill.MaxStock + 1), "stock"},
		{"user ok", seckill.ValidateUserID("tenant:user_1.a-b"), ""},
		{"user 64", seckill.ValidateUserID(strings.Repeat("u", 64)), ""},
		{"user empty", seckill.ValidateUserID(""), "user_id"},
		{"user 65", seckill.ValidateUserID(strings.Repeat("u", 65)), "user_id"},
		{"user space", seckill.ValidateUserID("a b"), "user_id"},
		{"user slash", seckill.ValidateUserID("a/b"), "user_id"},
		{"user non-ascii", seckill.ValidateUserID("é"), "user_id"},
		{"id 1", seckill.ValidateProductID(1), ""},
		{"id 0", seckill.ValidateProductID(0), "id"},
		{"page ok", seckill.OrderQuery{Limit: 1000, Offset: 0}.Validate(), ""},
		{"limit 0", seckill.OrderQuery{Limit: 0}.Validate(), "limit"},
		{"limit 1001", seckill.OrderQuery{Limit: 1001}.Validate(), "limit"},
		{"offset -1", seckill.OrderQuery{Limit: 1, Offset: -1}.Validate(), "offset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.field == "" {
				if tt.err != nil {
					t.Fatalf("got %v, want nil", tt.err)
				}
				return
			}
			var inv *seckill.InvalidError
			if !errors.As(tt.err, &inv) || !errors.Is(tt.err, seckill.ErrInvalid) {
				t.Fatalf("got %v, want an InvalidError matching ErrInvalid", tt.err)
			}
			if inv.Field != tt.field {
				t.Errorf("field: got %q, want %q", inv.Field, tt.field)
			}
		})
	}
}

func TestOutcomeOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want seckill.Outcome
	}{
		{nil, seckill.OutcomeCreated},
		{fmt.Errorf("x: %w", seckill.ErrFenceRejected), seckill.OutcomeFenceRejected},
		{fmt.Errorf("x: %w", seckill.ErrBusy), seckill.OutcomeBusy},
		{seckill.ErrSoldOut, seckill.OutcomeSoldOut},
		{seckill.ErrAlreadyPurchased, seckill.OutcomeAlreadyPurchased},
		{seckill.ErrNotFound, seckill.OutcomeNotFound},
		{seckill.Invalid("user_id", "bad"), seckill.OutcomeInvalid},
		{errors.New("disk on fire"), seckill.OutcomeError},
	}
	for _, tt := range tests {
		if got := seckill.OutcomeOf(tt.err); got != tt.want {
			t.Errorf("OutcomeOf(%v): got %q, want %q", tt.err, got, tt.want)
		}
	}
	if !errors.Is(seckill.ErrFenceRejected, seckill.ErrBusy) {
		t.Error("ErrFenceRejected does not match ErrBusy")
	}
}

package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// Ops of a ChurnWrite.
const (
	OpCreate = "create"
	OpUpdate = "update"
	OpDelete = "delete"
)

// ChurnLabel is the label in which every object Churn writes carries the
// Token of the write that wrote it.
const ChurnLabel = "churn-write"

// churnNamespace is where Churn writes.
const churnNamespace = model.DefaultNamespace

// ChurnWrite is one write of Churn.
type ChurnWrite struct {
	// Op is OpCreate, OpUpdate or OpDelete.
	Op string
	// Key is the "namespace/name" of the Hardware written.
	Key string
	// Token names the write: "NAME.N", N counting the name's writes from
	// 0. A created or updated object carries it as its ChurnLabel label
	// and ChurnUserData(Token) as its user data, so whoever reads the
	// object back can tell which write it holds and that its value is
	// whole.
	Token string
	// RV is the resourceVersion the store gave a create or update; "" for
	// a delete, and in Before.
	RV string
}

// ChurnConfig configures Churn.
type ChurnConfig struct {
	// Prefix starts every name Churn writes ("PREFIX-N"); two Churns on
	// one store need different prefixes. Required.
	Prefix string
	// Writer goes into the MAC addresses, so that concurrent Churns with
	// different Writer values never share one.
	Writer uint8
	// Rand chooses how many updates a name gets and whether it is
	// deleted. Required.
	Rand *rand.Rand
	// Before, if set, is called before each write is submitted.
	Before func(ChurnWrite)
	// After, if set, is called after the store acknowledged a write; an
	// error from it ends Churn with that error.
	After func(ChurnWrite) error
}

// ChurnUserData is the user data of the object written by the write
// Token: about 1 KiB that differs for every write.
func ChurnUserData(token string) string {
	return strings.Repeat(token+";", 1024/(len(token)+1)+1)
}

// Churn writes Hardware to s until stop is closed, in this pattern for
// name after name: a create, zero to three updates (alternately
// conditional on the resourceVersion and unconditional), then a delete
// half of the time. A name is never written again after its delete and
// only this call writes it, in order. Writes are not cancelled by stop:
// the one in flight completes and is reported to After before Churn
// returns. It returns nil after stop, or the first error of s or After.
func Churn(s store.Store, stop <-chan struct{}, cfg ChurnConfig) error {
	// The writes themselves are never cancelled: a caller that stops
	// wants every begun write answered, not abandoned.
	ctx := context.Background()
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	for i := 0; !stopped(); i++ {
		name := fmt.Sprintf("%s-%d", cfg.Prefix, i)
		w := ChurnWrite{Op: OpCreate, Key: churnNamespace + "/" + name}
		n := 0
		write := func(op string, do func() (model.Object, error)) (model.Object, error) {
			w.Op, w.Token, w.RV = op, name+"."+strconv.Itoa(n), ""
			n++
			if cfg.Before != nil {
				cfg.Before(w)
			}
			obj, err := do()
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", op, w.Key, err)
			}
			if obj != nil {
				w.RV = obj.GetObjectMeta().ResourceVersion
			}
			if cfg.After != nil {
				if err := cfg.After(w); err != nil {
					return nil, err
				}
			}
			return obj, nil
		}
		h := Hardware(churnNamespace, name, fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", cfg.Writer, byte(i>>24), byte(i>>16), byte(i>>8), byte(i)))
		fill := func(h *model.Hardware) {
			ud := ChurnUserData(name + "." + strconv.Itoa(n))
			h.Labels = map[string]string{ChurnLabel: name + "." + strconv.Itoa(n)}
			h.Spec.UserData = &ud
		}
		fill(h)
		obj, err := write(OpCreate, func() (model.Object, error) { return s.Create(ctx, h) })
		if err != nil {
			return err
		}
		for u := range cfg.Rand.IntN(4) {
			hw := obj.(*model.Hardware)
			fill(hw)
			if u%2 == 1 {
				hw.ResourceVersion = "" // unconditional
			}
			if obj, err = write(OpUpdate, func() (model.Object, error) { return s.Update(ctx, hw) }); err != nil {
				return err
			}
		}
		if cfg.Rand.IntN(2) == 0 {
			rv := obj.GetObjectMeta().ResourceVersion
			_, err := write(OpDelete, func() (model.Object, error) {
				return nil, s.Delete(ctx, model.KindHardware, churnNamespace, name, rv)
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckChurnValue returns nil if obj holds exactly what the Churn write
// token wrote (its ChurnLabel label and ChurnUserData), else an error
// saying what differs.
func CheckChurnValue(obj model.Object, token string) error {
	h, ok := obj.(*model.Hardware)
	if !ok {
		return fmt.Errorf("%T is not a Hardware", obj)
	}
	if got := h.Labels[ChurnLabel]; got != token {
		return fmt.Errorf("%s holds write %q, want %q", h.Key(), got, token)
	}
	if h.Spec.UserData == nil || *h.Spec.UserData != ChurnUserData(token) {
		return fmt.Errorf("%s: user data of write %s is not what was written", h.Key(), token)
	}
	return nil
}

package model

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestCommissioningLifecycle(t *testing.T) {
	now := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	hw := &Hardware{}
	c := &Commissioning{}
	hw.Status.Commissioning = c

	c.Record("default/c1", []CommissioningCheck{{Name: "memory", Result: CheckPassed}}, now)
	if c.Result != "" || hw.SetCommissioningLabel() {
		t.Fatalf("decided before the workflow ended: %+v, labels %v", c, hw.Labels)
	}
	c.End("default/other", StateSuccess, now) // another workflow: nothing
	c.End("default/c1", StateRunning, now)    // not ended: nothing
	if c.Result != "" {
		t.Fatalf("decided by another workflow or a running one: %+v", c)
	}
	// An action other than a check failed: the commissioning failed.
	c.End("default/c1", StateTimeout, now)
	if c.Result != CommissioningFailed || !strings.Contains(c.Message, "ended TIMEOUT") || !hw.SetCommissioningLabel() || !hw.CommissioningFailed() {
		t.Fatalf("after a TIMEOUT: %+v, labels %v", c, hw.Labels)
	}
	// A re-commissioning (another workflow's report) starts afresh.
	c.Record("default/c2", []CommissioningCheck{{Name: "smart/sda", Result: CheckUnsupported}}, now)
	if c.Result != "" || len(c.Checks) != 1 || !hw.SetCommissioningLabel() || hw.Labels[LabelCommissioning] != "" {
		t.Fatalf("after a new workflow's report: %+v, labels %v", c, hw.Labels)
	}
	c.End("default/c2", StateSuccess, now)
	if c.Result != CommissioningPassed || !hw.SetCommissioningLabel() || hw.Labels[LabelCommissioning] != CommissioningPassed {
		t.Fatalf("after SUCCESS: %+v, labels %v", c, hw.Labels)
	}
}

// TestCommissioningBounds: a report of thousands of checks and huge
// strings is kept within the bounds.
func TestCommissioningBounds(t *testing.T) {
	var checks []CommissioningCheck
	values := map[string]string{}
	for i := range 100 {
		values[fmt.Sprintf("k%03d-%s", i, strings.Repeat("k", 200))] = strings.Repeat("v", 10000)
	}
	detail := strings.Repeat("é", 100000)
	for i := range 5000 {
		checks = append(checks, CommissioningCheck{Name: fmt.Sprintf("check-%d-%s", i, strings.Repeat("x", 300)), Result: CheckPassed,
			Detail: detail, Values: values})
	}
	c := &Commissioning{}
	c.Record("default/c", checks, time.Now())
	if len(c.Checks) != MaxCommissioningChecks {
		t.Fatalf("%d checks kept", len(c.Checks))
	}
	for _, ch := range c.Checks {
		if len(ch.Name) > maxCheckName || len(ch.Detail) > maxCheckDetail || len(ch.Values) != maxCheckValues || !strings.HasSuffix(ch.Detail, "...") {
			t.Fatalf("a check beyond the bounds: name %d, detail %d, values %d", len(ch.Name), len(ch.Detail), len(ch.Values))
		}
		for k, v := range ch.Values {
			if len(k) > maxCheckName || len(v) > maxCheckValue {
				t.Fatalf("a value beyond the bounds: %d, %d", len(k), len(v))
			}
		}
	}
}

// TestRecommission: removing the label forgets the decided result, so
// that a commissioning workflow of the same name starts afresh.
func TestRecommission(t *testing.T) {
	now := time.Now()
	hw := &Hardware{}
	hw.RecordCommissioning("default/commission-m", []CommissioningCheck{{Name: "smart/sda", Result: CheckFailed}}, StateFailed, now)
	if !hw.CommissioningFailed() {
		t.Fatalf("not failed: %v", hw.Labels)
	}
	// Still labelled: a late report of the same workflow changes nothing.
	hw.RecordCommissioning("default/commission-m", []CommissioningCheck{{Name: "memory", Result: CheckPassed}}, StateFailed, now)
	if !hw.CommissioningFailed() || len(hw.Status.Commissioning.Checks) != 2 {
		t.Fatalf("after a late report: %+v %v", hw.Status.Commissioning, hw.Labels)
	}
	delete(hw.Labels, LabelCommissioning)
	hw.RecordCommissioning("default/commission-m", []CommissioningCheck{{Name: "smart/sda", Result: CheckPassed}}, StateRunning, now)
	if c := hw.Status.Commissioning; c.Result != "" || len(c.Checks) != 1 || hw.Labels[LabelCommissioning] != "" {
		t.Fatalf("re-commissioning: %+v %v", c, hw.Labels)
	}
	hw.RecordCommissioning("default/commission-m", nil, StateSuccess, now)
	if hw.Labels[LabelCommissioning] != CommissioningPassed {
		t.Fatalf("re-commissioning did not pass: %+v %v", hw.Status.Commissioning, hw.Labels)
	}
}

package bmc

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvilproj/anvil/internal/model"
)

// Per-provider metrics of every call to a BMC, labelled by provider
// (ipmitool, redfish) and operation (open, power_state, set_power,
// set_boot_device, insert_media, eject_media, close).
var (
	bmcCalls = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_bmc_calls_total",
		Help: "Calls to BMCs, by provider and operation.",
	}, []string{"provider", "op"})
	bmcErrors = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_bmc_errors_total",
		Help: "Calls to BMCs that failed, by provider and operation.",
	}, []string{"provider", "op"})
	bmcLatency = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "anvil_bmc_call_duration_seconds",
		Help:    "Time of calls to BMCs, by provider and operation; a failed call counts too.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	}, []string{"provider", "op"})
	bmcJobs = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_bmc_jobs_total",
		Help: "BMC Jobs finished, by result (completed, failed).",
	}, []string{"result"})
)

// Operation names of the metrics.
const (
	opOpen          = "open"
	opPowerState    = "power_state"
	opSetPower      = "set_power"
	opSetBootDevice = "set_boot_device"
	opClose         = "close"
	opInsertMedia   = "insert_media"
	opEjectMedia    = "eject_media"
	opActivateSOL   = "activate_sol"
	opInventory     = "inventory"
)

// observe runs one call to a BMC and records it.
func observe(provider, op string, fn func() error) error {
	start := time.Now()
	err := fn()
	bmcCalls.WithLabelValues(provider, op).Inc()
	bmcLatency.WithLabelValues(provider, op).Observe(time.Since(start).Seconds())
	if err != nil {
		bmcErrors.WithLabelValues(provider, op).Inc()
	}
	return err
}

// measured wraps a Session so that every call is observed.
type measured struct {
	provider string
	s        Session
}

func (m measured) PowerState(ctx context.Context) (st string, err error) {
	err = observe(m.provider, opPowerState, func() error { st, err = m.s.PowerState(ctx); return err })
	return st, err
}

func (m measured) SetPower(ctx context.Context, action string) error {
	return observe(m.provider, opSetPower, func() error { return m.s.SetPower(ctx, action) })
}

func (m measured) SetBootDevice(ctx context.Context, device string, efi, persistent bool) error {
	return observe(m.provider, opSetBootDevice, func() error { return m.s.SetBootDevice(ctx, device, efi, persistent) })
}

func (m measured) Close(ctx context.Context) error {
	return observe(m.provider, opClose, func() error { return m.s.Close(ctx) })
}

// inventory returns the wrapped session as an InventorySession whose
// Inventory is observed, if it is one.
func (m measured) inventory() (func(context.Context) (*model.OutOfBand, error), bool) {
	is, ok := m.s.(InventorySession)
	if !ok {
		return nil, false
	}
	return func(ctx context.Context) (o *model.OutOfBand, err error) {
		err = observe(m.provider, opInventory, func() error { o, err = is.Inventory(ctx); return err })
		return o, err
	}, true
}

// inventoryOf is inventory of a session openMeasured returned.
func inventoryOf(s Session) (func(context.Context) (*model.OutOfBand, error), bool) {
	switch m := s.(type) {
	case measured:
		return m.inventory()
	case measuredMedia:
		return m.inventory()
	}
	return nil, false
}

// measuredMedia is measured for a session with virtual media.
type measuredMedia struct {
	measured
	m MediaSession
}

func (m measuredMedia) InsertMedia(ctx context.Context, kind, url string) error {
	return observe(m.provider, opInsertMedia, func() error { return m.m.InsertMedia(ctx, kind, url) })
}

func (m measuredMedia) EjectMedia(ctx context.Context, kind string) error {
	return observe(m.provider, opEjectMedia, func() error { return m.m.EjectMedia(ctx, kind) })
}

// openMeasured opens a session through p, observed.
func openMeasured(ctx context.Context, p Provider, c Conn) (Session, error) {
	var s Session
	err := observe(p.Name(), opOpen, func() error {
		var err error
		s, err = p.Open(ctx, c)
		return err
	})
	if err != nil {
		return nil, err
	}
	ms := measured{provider: p.Name(), s: s}
	if m, ok := s.(MediaSession); ok {
		return measuredMedia{measured: ms, m: m}, nil
	}
	return ms, nil
}

// Metrics of the power-state poller (Poller).
var (
	bmcPolls = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_bmc_polls_total",
		Help: "Power-state polls of Machines, by result: ok, failed (the Machine is then backed off), busy (a Job held the BMC; polled again soon).",
	}, []string{"result"})
	bmcPollSweep = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "anvil_bmc_poll_sweep_duration_seconds",
		Help:    "Time of one sweep of the power-state poller: every Machine due at once, polled with bounded concurrency.",
		Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300},
	})
	bmcPollBackingOff = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "anvil_bmc_poll_backing_off_machines",
		Help: "Machines whose last poll failed, polled again after an exponential back-off rather than every interval.",
	})
)

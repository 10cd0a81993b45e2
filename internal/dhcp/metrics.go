package dhcp

import (
	"sync"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Prometheus metrics, on the default registry. Label values come from
// small fixed sets: the type labels below and the Outcome* constants.
var (
	packetsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_dhcp_packets_total",
		Help: "DHCP packets received, by message type (discover, request, inform, release, decline, other, malformed) and outcome.",
	}, []string{"type", "outcome"})
	repliesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_dhcp_replies_total",
		Help: "DHCP replies sent, by message type (offer, ack, nak).",
	}, []string{"type"})
	sendErrors = promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_dhcp_send_errors_total",
		Help: "DHCP replies that could not be sent.",
	})
)

// Values of the type label.
const (
	typeDiscover  = "discover"
	typeRequest   = "request"
	typeInform    = "inform"
	typeRelease   = "release"
	typeDecline   = "decline"
	typeOther     = "other"
	typeMalformed = "malformed"
)

func typeLabel(t dhcpv4.MessageType) string {
	switch t {
	case dhcpv4.MessageTypeDiscover:
		return typeDiscover
	case dhcpv4.MessageTypeRequest:
		return typeRequest
	case dhcpv4.MessageTypeInform:
		return typeInform
	case dhcpv4.MessageTypeRelease:
		return typeRelease
	case dhcpv4.MessageTypeDecline:
		return typeDecline
	}
	return typeOther
}

// counters caches the children of packetsTotal:
// WithLabelValues hashes its labels and takes a lock on every call, which
// shows at tens of thousands of packets a second.
var counters sync.Map // counterKey → prometheus.Counter

type counterKey struct{ vec, a, b string }

func cachedCounter(vec *prometheus.CounterVec, name string, labels ...string) prometheus.Counter {
	k := counterKey{vec: name, a: labels[0]}
	if len(labels) > 1 {
		k.b = labels[1]
	}
	if c, ok := counters.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c, _ := counters.LoadOrStore(k, vec.WithLabelValues(labels...))
	return c.(prometheus.Counter)
}

func countPacket(typ, outcome string) {
	cachedCounter(packetsTotal, "packets", typ, outcome).Inc()
}

// Children of repliesTotal, made once: every reply sent counts in one of
// them, and a lookup by label per reply is CPU the packet path can skip.
var (
	offersSent = repliesTotal.WithLabelValues("offer")
	acksSent   = repliesTotal.WithLabelValues("ack")
	naksSent   = repliesTotal.WithLabelValues("nak")
)

func countReply(t dhcpv4.MessageType) {
	switch t {
	case dhcpv4.MessageTypeOffer:
		offersSent.Inc()
	case dhcpv4.MessageTypeAck:
		acksSent.Inc()
	case dhcpv4.MessageTypeNak:
		naksSent.Inc()
	}
}

package dhcp

import (
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Message returns d as the sentence logs and machine events carry, e.g.
// "DISCOVER from 52:54:00:12:34:56 (uefi-x86_64, PXEClient): OFFER
// 10.0.0.5, boot file ipxe.efi via TFTP 10.0.0.1" or "REQUEST from
// 52:54:00:12:34:56: no answer: no Hardware has this MAC".
func (d *Decision) Message() string {
	b := make([]byte, 0, 160)
	b = append(b, msgTypeUpper(d.Type)...)
	if d.MAC.IsValid() {
		b = append(b, " from "...)
		b, _ = d.MAC.AppendText(b) // never fails
	}
	if d.Client != "" {
		b = append(b, " ("...)
		if d.Firmware != 0 {
			b = append(b, d.Firmware.String()...)
			b = append(b, ", "...)
		}
		b = append(b, d.Client...)
		b = append(b, ')')
	}
	if d.Host != "" {
		b = append(b, " ["...)
		b = append(b, d.Host...)
		b = append(b, ']')
	}
	b = append(b, ": "...)
	if d.Reply == dhcpv4.MessageTypeNone {
		switch d.Outcome {
		case OutcomeReleased, OutcomeDeclined:
			b = append(b, "logged"...)
			if d.IP.IsValid() {
				b = append(b, ", address "...)
				b = d.IP.AppendTo(b)
			}
		default:
			b = append(b, "no answer"...)
		}
		if d.Reason != "" {
			b = append(b, ": "...)
			b = append(b, d.Reason...)
		}
		return string(b)
	}
	b = append(b, msgTypeUpper(d.Reply)...)
	if d.IP.IsValid() {
		b = append(b, ' ')
		b = d.IP.AppendTo(b)
	}
	if d.BootFile != "" {
		b = append(b, ", boot file "...)
		b = append(b, d.BootFile...)
		if d.BootServer != "" {
			b = append(b, " via TFTP "...)
			b = append(b, d.BootServer...)
		}
	}
	if d.Reason != "" {
		b = append(b, ", "...)
		b = append(b, d.Reason...)
	}
	return string(b)
}

// msgTypeUpper names t the way RFC 2131 writes it: DISCOVER, OFFER, ….
func msgTypeUpper(t dhcpv4.MessageType) string {
	switch t {
	case dhcpv4.MessageTypeDiscover:
		return "DISCOVER"
	case dhcpv4.MessageTypeOffer:
		return "OFFER"
	case dhcpv4.MessageTypeRequest:
		return "REQUEST"
	case dhcpv4.MessageTypeDecline:
		return "DECLINE"
	case dhcpv4.MessageTypeAck:
		return "ACK"
	case dhcpv4.MessageTypeNak:
		return "NAK"
	case dhcpv4.MessageTypeRelease:
		return "RELEASE"
	case dhcpv4.MessageTypeInform:
		return "INFORM"
	case dhcpv4.MessageTypeNone:
		return "BOOTP"
	}
	return "DHCP type " + t.String()
}

// msgTypeName is the lower-case form for structured log fields.
func msgTypeName(t dhcpv4.MessageType) string {
	switch t {
	case dhcpv4.MessageTypeDiscover:
		return "discover"
	case dhcpv4.MessageTypeOffer:
		return "offer"
	case dhcpv4.MessageTypeRequest:
		return "request"
	case dhcpv4.MessageTypeDecline:
		return "decline"
	case dhcpv4.MessageTypeAck:
		return "ack"
	case dhcpv4.MessageTypeNak:
		return "nak"
	case dhcpv4.MessageTypeRelease:
		return "release"
	case dhcpv4.MessageTypeInform:
		return "inform"
	case dhcpv4.MessageTypeNone:
		return "none"
	}
	return "other"
}

package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// ipxeBlksize is the blksize iPXE asks for (TFTP_MAX_BLKSIZE in iPXE's
// include/ipxe/tftp.h: an Ethernet frame's worth).
const ipxeBlksize = 1432

const (
	tftpRRQ   = 1
	tftpDATA  = 3
	tftpACK   = 4
	tftpERROR = 5
	tftpOACK  = 6
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func newCRC() hash.Hash32 { return crc32.New(castagnoli) }

// tftpResult is what one download moved.
type tftpResult struct {
	size        int64
	crc         uint32
	retransmits int
	wire        int64 // bytes of every datagram both ways
}

// tftpGet downloads file from server as iPXE does — RRQ with blksize 1432
// and tsize 0, then one ACK per DATA (no windowsize) — from local, and
// retransmits after 1, 2, 4, 8, 8 s without progress.
func tftpGet(local netip.Addr, server netip.AddrPort, file string) (tftpResult, error) {
	var res tftpResult
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)))
	if err != nil {
		return res, err
	}
	defer c.Close()
	rrq := binary.BigEndian.AppendUint16(nil, tftpRRQ)
	rrq = append(rrq, file+"\x00octet\x00blksize\x00"+strconv.Itoa(ipxeBlksize)+"\x00tsize\x000\x00"...)
	h := newCRC()
	buf := make([]byte, 65536)
	last := rrq  // what to send again on a timeout
	to := server // the server's port 69, then its transfer port
	var peer netip.AddrPort
	blksize := 512
	next := uint16(1) // the DATA block awaited
	tries := 0
	if _, err := c.WriteToUDPAddrPort(last, to); err != nil {
		return res, err
	}
	res.wire += int64(len(last))
	for {
		wait := min(time.Second<<tries, 8*time.Second)
		_ = c.SetReadDeadline(time.Now().Add(wait))
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				return res, err
			}
			if tries++; tries > 5 {
				return res, fmt.Errorf("tftp %s: no progress after %d tries (block %d)", file, tries, next)
			}
			res.retransmits++
			if _, err := c.WriteToUDPAddrPort(last, to); err != nil {
				return res, err
			}
			res.wire += int64(len(last))
			continue
		}
		res.wire += int64(n)
		pkt := buf[:n]
		if n < 4 {
			continue
		}
		if !peer.IsValid() {
			peer, to = from, from
		} else if from != peer {
			continue // another transfer's
		}
		switch binary.BigEndian.Uint16(pkt) {
		case tftpERROR:
			return res, fmt.Errorf("tftp %s: error %d: %s", file, binary.BigEndian.Uint16(pkt[2:]), strings.TrimRight(string(pkt[4:]), "\x00"))
		case tftpOACK:
			opts := strings.Split(strings.TrimRight(string(pkt[2:]), "\x00"), "\x00")
			for i := 0; i+1 < len(opts); i += 2 {
				if strings.EqualFold(opts[i], "blksize") {
					if blksize, err = strconv.Atoi(opts[i+1]); err != nil || blksize < 8 {
						return res, fmt.Errorf("tftp %s: OACK blksize %q", file, opts[i+1])
					}
				}
			}
			last = ack(0)
		case tftpDATA:
			block := binary.BigEndian.Uint16(pkt[2:])
			if block != next {
				// A duplicate of the last block: ACK it again, as
				// RFC 1350 has it.
				if block == next-1 {
					if _, err := c.WriteToUDPAddrPort(ack(block), to); err != nil {
						return res, err
					}
					res.wire += 4
				}
				continue
			}
			data := pkt[4:]
			h.Write(data)
			res.size += int64(len(data))
			last = ack(block)
			next++
			if len(data) < blksize {
				if _, err := c.WriteToUDPAddrPort(last, to); err != nil {
					return res, err
				}
				res.wire += int64(len(last))
				res.crc = h.Sum32()
				return res, nil
			}
		default:
			continue
		}
		tries = 0
		if _, err := c.WriteToUDPAddrPort(last, to); err != nil {
			return res, err
		}
		res.wire += int64(len(last))
	}
}

func ack(block uint16) []byte {
	return []byte{0, tftpACK, byte(block >> 8), byte(block)}
}

package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"
)

// The loopback floor: the storm's bytes moved by the bench alone, with no
// server logic — what the machine and its loopback device cost at the same
// concurrency. Per machine, in the same order as its boot: four DHCP-sized
// UDP request/answer pairs, the iPXE binary in lockstep 1432-byte blocks
// (the same client code as the storm's TFTP, against a sender that only
// copies blocks), then a script-sized body, the kernel and the initramfs
// on one TCP connection, sent from the files by sendfile and read into the
// same checksum. The agent's GetAction (a few hundred bytes) is left out.

// dhcpPacket is about a DHCP request's or answer's size with its options.
const dhcpPacket = 300

// scriptBytes is about an iPXE boot environment script's size.
const scriptBytes = 1024

func measureFloor(ctx context.Context, n int, exp *expected) (time.Duration, int, error) {
	echo, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return 0, 0, err
	}
	defer echo.Close()
	_ = echo.SetReadBuffer(8 << 20)
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := echo.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = echo.WriteToUDPAddrPort(buf[:n], from)
		}
	}()

	ipxeBytes, err := os.ReadFile(exp.ipxe.path)
	if err != nil {
		return 0, 0, err
	}
	tftpSrv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return 0, 0, err
	}
	defer tftpSrv.Close()
	_ = tftpSrv.SetReadBuffer(8 << 20)
	go serveBlocks(tftpSrv, ipxeBytes)

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	defer ln.Close()
	files := map[string]fileInfo{"script": {size: scriptBytes}, "kernel": exp.kernel, "initrd": exp.initrd}
	go serveCopies(ln, files)

	errs := make([]error, n)
	retrans := make([]int, n)
	t0 := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			retrans[i], errs[i] = floorMachine(ctx, i, echo.LocalAddr().(*net.UDPAddr).AddrPort(),
				tftpSrv.LocalAddr().(*net.UDPAddr).AddrPort(), ln.Addr().String(), exp)
		})
	}
	wg.Wait()
	d := time.Since(t0)
	total := 0
	for i, err := range errs {
		if err != nil {
			return d, total, err
		}
		total += retrans[i]
	}
	return d, total, nil
}

func floorMachine(ctx context.Context, i int, echo, tftp netip.AddrPort, tcp string, exp *expected) (retransmits int, err error) {
	local := netip.MustParseAddr(machineIP(i))
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	pkt := make([]byte, dhcpPacket)
	buf := make([]byte, 1500)
	exchange := func() error {
		for try := 0; try < 4; try++ {
			if _, err := c.WriteToUDPAddrPort(pkt, echo); err != nil {
				return err
			}
			_ = c.SetReadDeadline(time.Now().Add(4 * time.Second << try))
			if _, _, err := c.ReadFromUDPAddrPort(buf); err == nil {
				return nil
			}
		}
		return fmt.Errorf("floor: DHCP-sized exchange of machine %d unanswered", i)
	}
	for range 2 { // DISCOVER/OFFER, REQUEST/ACK
		if err := exchange(); err != nil {
			return 0, err
		}
	}
	tr, err := tftpGet(local, tftp, exp.ipxe.name)
	if err != nil {
		return tr.retransmits, fmt.Errorf("floor tftp: %w", err)
	}
	if tr.size != exp.ipxe.size || tr.crc != exp.ipxe.crc {
		return tr.retransmits, fmt.Errorf("floor tftp: %d bytes, want %d", tr.size, exp.ipxe.size)
	}
	for range 2 { // iPXE's DORA
		if err := exchange(); err != nil {
			return tr.retransmits, err
		}
	}

	conn, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: local.AsSlice()}}).DialContext(ctx, "tcp4", tcp)
	if err != nil {
		return tr.retransmits, err
	}
	defer conn.Close()
	r := bufio.NewReaderSize(conn, 64<<10)
	for _, f := range []struct {
		name string
		want fileInfo
	}{{"script", fileInfo{size: scriptBytes}}, {"kernel", exp.kernel}, {"initrd", exp.initrd}} {
		if _, err := io.WriteString(conn, f.name+"\n"); err != nil {
			return tr.retransmits, err
		}
		var size int64
		if err := binary.Read(r, binary.BigEndian, &size); err != nil {
			return tr.retransmits, err
		}
		h := newCRC()
		got, err := io.CopyN(h, r, size)
		if err != nil {
			return tr.retransmits, err
		}
		if f.want.path != "" && (got != f.want.size || h.Sum32() != f.want.crc) {
			return tr.retransmits, fmt.Errorf("floor %s: %d bytes, CRC %08x; want %d, %08x", f.name, got, h.Sum32(), f.want.size, f.want.crc)
		}
	}
	return tr.retransmits, nil
}

// serveBlocks answers each RRQ on c with an OACK naming iPXE's blksize
// and then data's blocks in lockstep, each sent when the previous one is
// ACKed, as a TFTP server would with nothing else: no file, no option or
// path checks, one socket and one goroutine for every transfer (a loopback
// socket with a large buffer loses nothing, so there are no timeouts).
func serveBlocks(c *net.UDPConn, data []byte) {
	buf := make([]byte, 1500)
	out := make([]byte, 0, 4+ipxeBlksize)
	oack := append(binary.BigEndian.AppendUint16(nil, tftpOACK), fmt.Sprintf("blksize\x00%d\x00", ipxeBlksize)...)
	acked := map[netip.AddrPort]int{} // the block each transfer waits an ACK of
	for {
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil || n < 4 {
			if err != nil {
				return
			}
			continue
		}
		switch binary.BigEndian.Uint16(buf) {
		case tftpRRQ:
			acked[from] = 0
			_, _ = c.WriteToUDPAddrPort(oack, from)
		case tftpACK:
			block, ok := acked[from]
			if !ok || int(binary.BigEndian.Uint16(buf[2:])) != block&0xffff {
				continue
			}
			lo := block * ipxeBlksize
			if lo > len(data) {
				delete(acked, from) // the last block's ACK
				continue
			}
			out = append(binary.BigEndian.AppendUint16(out[:0], tftpDATA), byte((block+1)>>8), byte(block+1))
			out = append(out, data[lo:min(lo+ipxeBlksize, len(data))]...)
			acked[from] = block + 1
			_, _ = c.WriteToUDPAddrPort(out, from)
		}
	}
}

// serveCopies answers each line naming a file with its size and its bytes,
// by sendfile for the files on disk.
func serveCopies(ln net.Listener, files map[string]fileInfo) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			r := bufio.NewReader(conn)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				f := files[strings.TrimSpace(line)]
				if err := binary.Write(conn, binary.BigEndian, f.size); err != nil {
					return
				}
				if f.path == "" {
					if _, err := conn.Write(make([]byte, f.size)); err != nil {
						return
					}
					continue
				}
				file, err := os.Open(f.path)
				if err != nil {
					return
				}
				_, err = io.CopyN(conn, file, f.size) // sendfile
				file.Close()
				if err != nil {
					return
				}
			}
		}()
	}
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
	"github.com/anvilproj/anvil/internal/benchfleet"
	"github.com/anvilproj/anvil/internal/benchproc"
)

// Phases of one machine's boot, in order.
const (
	phaseDHCP     = iota // firmware's DORA through the relay
	phaseTFTP            // the iPXE binary
	phaseIPXEDHCP        // iPXE's DORA
	phaseScript          // the iPXE script over HTTP
	phaseKernel          // the kernel over HTTP
	phaseInitrd          // the initramfs over HTTP
	phaseAgent           // the agent's first GetAction
	numPhases
)

var phaseNames = [numPhases]string{"dhcp", "tftp", "ipxe_dhcp", "script", "kernel", "initramfs", "get_action"}

// fileInfo is a file served during the storm: what must arrive.
type fileInfo struct {
	path, name string
	size       int64
	crc        uint32
}

// expected is what every machine must receive.
type expected struct {
	ipxe, kernel, initrd fileInfo
	tftp                 netip.AddrPort // the server's TFTP port (DHCP names the address only)
}

// machineOut is one machine's boot.
type machineOut struct {
	phase           [numPhases]time.Duration
	total           time.Duration
	bytes           int64 // payload bytes: DHCP packets, TFTP data, HTTP bodies
	refusals        map[int]int
	dhcpRetransmits int // requests sent again for want of an answer
	tftpRetransmits int // RRQs and ACKs sent again
	failedAt        int // the phase that failed, -1 if none
	kind            string
	err             error
}

// boot runs machine i's boot from power-on to its first action.
func boot(ctx context.Context, i int, rl *relay, exp *expected) (out machineOut) {
	out.failedAt = -1
	out.refusals = map[int]int{}
	start := time.Now()
	phase := 0
	mark := time.Now()
	step := func(p int) {
		out.phase[p] = time.Since(mark)
		mark = time.Now()
		phase = p + 1
	}
	fail := func(kind string, err error) machineOut {
		out.failedAt, out.kind, out.err = phase, kind, fmt.Errorf("machine %d: %s: %w", i, phaseNames[phase], err)
		out.total = time.Since(start)
		return out
	}
	macStr := benchfleet.MAC(i)
	mac, _ := net.ParseMAC(macStr)
	want := netip.MustParseAddr(machineIP(i))

	// 1. The firmware's DHCP.
	ack, n, re, err := rl.dora(ctx, mac, uint32(i)<<4|1, pxeROM)
	out.bytes += n
	out.dhcpRetransmits += re
	if err != nil {
		return fail("dhcp", err)
	}
	got, _ := netip.AddrFromSlice(ack.YourIPAddr.To4())
	if got != want {
		return fail("dhcp", fmt.Errorf("offered %s, its Hardware reserves %s", got, want))
	}
	file := bootFile(ack)
	server, _ := netip.AddrFromSlice(ack.ServerIPAddr.To4())
	if file != exp.ipxe.name || server != exp.tftp.Addr() {
		return fail("dhcp", fmt.Errorf("boot file %q from %s, want %q from %s", file, server, exp.ipxe.name, exp.tftp.Addr()))
	}
	step(phaseDHCP)

	// 2. The iPXE binary over TFTP.
	tr, err := tftpGet(got, exp.tftp, file)
	out.tftpRetransmits += tr.retransmits
	out.bytes += tr.size
	if err != nil {
		return fail("tftp", err)
	}
	if tr.size != exp.ipxe.size || tr.crc != exp.ipxe.crc {
		return fail("wrong_bytes", fmt.Errorf("%s: %d bytes, CRC %08x; want %d, %08x", file, tr.size, tr.crc, exp.ipxe.size, exp.ipxe.crc))
	}
	step(phaseTFTP)

	// 3. iPXE's DHCP: its answer names the script.
	ack, n, re, err = rl.dora(ctx, mac, uint32(i)<<4|2, ipxeFW)
	out.bytes += n
	out.dhcpRetransmits += re
	if err != nil {
		return fail("dhcp", err)
	}
	scriptURL := bootFile(ack)
	if !strings.HasPrefix(scriptURL, "http://") {
		return fail("dhcp", fmt.Errorf("iPXE's answer names %q, not a script URL", scriptURL))
	}
	step(phaseIPXEDHCP)

	// 4. Script, kernel, initramfs on one keep-alive connection.
	hc := ipxeClient(got)
	defer hc.CloseIdleConnections()
	var script strings.Builder
	nb, err := fetch(ctx, hc, scriptURL, &script, out.refusals)
	out.bytes += nb
	if err != nil {
		return fail(failKind(err), err)
	}
	sc, err := parseScript(script.String())
	if err != nil {
		return fail("script", err)
	}
	if sc.worker != macStr {
		return fail("script", fmt.Errorf("worker_id %q, want %s", sc.worker, macStr))
	}
	step(phaseScript)
	for _, f := range []struct {
		url   string
		want  fileInfo
		phase int
	}{{sc.kernel, exp.kernel, phaseKernel}, {sc.initrd, exp.initrd, phaseInitrd}} {
		h := newCRC()
		nb, err := fetch(ctx, hc, f.url, h, out.refusals)
		out.bytes += nb
		if err != nil {
			return fail(failKind(err), err)
		}
		if nb != f.want.size || h.Sum32() != f.want.crc {
			return fail("wrong_bytes", fmt.Errorf("%s: %d bytes, CRC %08x; want %d, %08x", f.url, nb, h.Sum32(), f.want.size, f.want.crc))
		}
		step(f.phase)
	}

	// 5. The agent's first GetAction, from the machine's address.
	agent := anvilv1connect.NewAgentServiceClient(benchproc.NewH2CClientFrom(&net.TCPAddr{IP: got.AsSlice()}),
		"http://"+sc.grpc, connect.WithGRPC())
	resp, err := agent.GetAction(ctx, connect.NewRequest(&v1.GetActionRequest{AgentId: sc.worker, Wait: durationpb.New(10 * time.Second)}))
	if err != nil {
		return fail("get_action", err)
	}
	if resp.Msg.GetName() == "" {
		return fail("get_action", fmt.Errorf("no action for %s", sc.worker))
	}
	out.bytes += int64(len(resp.Msg.String()))
	step(phaseAgent)
	out.total = time.Since(start)
	return out
}

// machineIP is machine i's reserved address: 127.1.0.0/16 on, own to it,
// loopback like every 127.0.0.0/8 address on Linux.
func machineIP(i int) string {
	v := uint32(i) + 1
	return fmt.Sprintf("127.%d.%d.%d", 1+byte(v>>16), byte(v>>8), byte(v))
}

// ipxeClient is one machine's HTTP client: its own address, one
// connection kept alive (iPXE reuses a pooled connection per server).
func ipxeClient(local netip.Addr) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext:        (&net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: local.AsSlice()}}).DialContext,
			MaxConnsPerHost:    1,
			DisableCompression: true, // iPXE asks for no encoding it cannot undo
		},
		Timeout: 5 * time.Minute,
		// iPXE follows redirects; none are expected here.
	}
}

// refusedError is a response that was not 2xx and had no Retry-After:
// iPXE gives up on it.
type refusedError struct {
	url    string
	status int
}

func (e *refusedError) Error() string { return fmt.Sprintf("GET %s: status %d", e.url, e.status) }

func failKind(err error) string {
	if re, ok := err.(*refusedError); ok {
		return "http_" + strconv.Itoa(re.status)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return "timeout"
	}
	return "http_error"
}

// fetch GETs url into w as iPXE does: a response with Retry-After is
// retried after that many seconds (counted in refusals by status), any
// other failure ends it. It returns the body's bytes.
func fetch(ctx context.Context, hc *http.Client, url string, w io.Writer, refusals map[int]int) (int64, error) {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("User-Agent", "iPXE/1.21.1")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		if resp.StatusCode/100 == 2 {
			n, err := io.Copy(w, resp.Body)
			resp.Body.Close()
			return n, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ra := resp.Header.Get("Retry-After")
		if ra == "" {
			return 0, &refusedError{url: url, status: resp.StatusCode}
		}
		refusals[resp.StatusCode]++
		secs, err := strconv.Atoi(strings.TrimSpace(ra))
		if err != nil {
			secs = 5 // iPXE's HTTP_RETRY_SECONDS for what it cannot parse
		}
		t := time.NewTimer(time.Duration(secs) * time.Second)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		}
	}
}

// bootScript is what the storm reads from a machine's iPXE script.
type bootScript struct {
	kernel, initrd string
	grpc, worker   string // grpc_authority= and worker_id= of the kernel line
}

func parseScript(s string) (bootScript, error) {
	var b bootScript
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "kernel":
			b.kernel = f[1]
			for _, a := range f[2:] {
				if v, ok := strings.CutPrefix(a, "grpc_authority="); ok {
					b.grpc = v
				}
				if v, ok := strings.CutPrefix(a, "worker_id="); ok {
					b.worker = v
				}
			}
		case "initrd":
			if b.initrd == "" {
				b.initrd = f[1]
			}
		}
	}
	if b.kernel == "" || b.initrd == "" || b.grpc == "" || b.worker == "" {
		return b, fmt.Errorf("script names no kernel, initrd, grpc_authority or worker_id:\n%s", s)
	}
	return b, nil
}

// abuser is one client in a loop on one boot path URL from 8 connections
// at once: what a per-client limit must stop.
type abuser struct {
	served, refused, failed atomic.Int64
}

func (a *abuser) run(ctx context.Context, local netip.Addr, url string) {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{LocalAddr: &net.TCPAddr{IP: local.AsSlice()}}).DialContext,
		MaxIdleConnsPerHost: 8,
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: time.Minute}
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				resp, err := hc.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						a.failed.Add(1)
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode/100 == 2:
					a.served.Add(1)
				case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
					a.refused.Add(1)
				default:
					a.failed.Add(1)
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
}

package e2e

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// trunkSwitch stands in for a switch with a trunk port to the machine.
// The lab's host kernel has neither 802.1Q interfaces (no 8021q) nor
// VLAN-filtering bridges, so the test process forwards the frames itself;
// the tagging that matters is done by the machine's own kernel (Debian's,
// with 8021q). The machine's NIC is QEMU's datagram netdev on a unix
// socket, the trunk: its untagged frames belong to the native segment, its
// frames tagged vid to the VLAN, anything else is dropped. Each segment is
// an access port: a tap the switch owns, on that segment's bridge.
type trunkSwitch struct {
	conn         *net.UnixConn // the switch's end of the trunk
	qemu         *net.UnixAddr // QEMU's end
	native, vlan *os.File      // the access ports' taps
	vid          uint16
	// tagged and untagged count the machine's frames, by port.
	tagged, untagged atomic.Int64
}

// etherTypeVLAN is the 802.1Q tag's TPID (IEEE 802.1Q §9.5).
const etherTypeVLAN = 0x8100

// startTrunkSwitch connects a machine (use sw.netdev() as its vm.netdev)
// to nativeBr untagged and to vlanBr on VLAN vid, both bridges in ns.
func startTrunkSwitch(t *testing.T, ns *netns, nativeBr, vlanBr string, vid uint16) *trunkSwitch {
	t.Helper()
	dir := t.TempDir()
	sw := &trunkSwitch{qemu: &net.UnixAddr{Name: filepath.Join(dir, "qemu.sock"), Net: "unixgram"}, vid: vid}
	var err error
	sw.conn, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "switch.sock"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	sw.native = openTap(t, ns, "swnative", nativeBr)
	sw.vlan = openTap(t, ns, "swvlan", vlanBr)
	t.Cleanup(func() { sw.conn.Close(); sw.native.Close(); sw.vlan.Close() })
	go sw.fromTrunk()
	go sw.toTrunk(sw.native, false)
	go sw.toTrunk(sw.vlan, true)
	return sw
}

// netdev is QEMU's -netdev for the machine's end of the trunk.
func (sw *trunkSwitch) netdev() string {
	return "dgram,id=n0,local.type=unix,local.path=" + sw.qemu.Name + ",remote.type=unix,remote.path=" + sw.conn.LocalAddr().String()
}

// fromTrunk sorts the machine's frames onto the access ports, taking the
// tag off VLAN frames as an access port does.
func (sw *trunkSwitch) fromTrunk() {
	buf := make([]byte, 65536)
	for {
		n, _, err := sw.conn.ReadFromUnix(buf)
		if err != nil {
			return // closed
		}
		f := buf[:n]
		if len(f) < 14 {
			continue
		}
		port := sw.native
		if binary.BigEndian.Uint16(f[12:14]) == etherTypeVLAN {
			if len(f) < 18 || binary.BigEndian.Uint16(f[14:16])&0x0fff != sw.vid {
				continue
			}
			copy(f[12:], f[16:])
			f = f[:len(f)-4]
			port = sw.vlan
			sw.tagged.Add(1)
		} else {
			sw.untagged.Add(1)
		}
		_, _ = port.Write(f) // a full or closed port drops the frame, as a switch would
	}
}

// toTrunk sends an access port's frames to the machine, tagged if the
// port is the VLAN's.
func (sw *trunkSwitch) toTrunk(port *os.File, tag bool) {
	buf := make([]byte, 65536)
	for {
		n, err := port.Read(buf[4:])
		if err != nil {
			return // closed
		}
		f := buf[4 : 4+n]
		if tag && n >= 12 {
			f = buf[:4+n]
			copy(f, f[4:16]) // the addresses move up to make room for the tag
			binary.BigEndian.PutUint16(f[12:], etherTypeVLAN)
			binary.BigEndian.PutUint16(f[14:], sw.vid)
		}
		// Before QEMU has bound its end the frame has nowhere to go.
		if _, err := sw.conn.WriteToUnix(f, sw.qemu); err != nil && errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// openTap creates tap device name in ns, owned by the test process, and
// puts it on bridge br.
func openTap(t *testing.T, ns *netns, name, br string) *os.File {
	t.Helper()
	var f *os.File
	err := inNetns(ns, func() error {
		// The tap is created in the namespace of the thread that opens
		// the clone device.
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return err
		}
		f = os.NewFile(uintptr(fd), name) // non-blocking: reads wait in the poller, Close ends them
		return nil
	})
	if err != nil {
		t.Fatalf("tap %s in %s: %v", name, ns.name, err)
	}
	ns.ip("link", "set", name, "master", br, "up")
	return f
}

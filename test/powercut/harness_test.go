package powercut

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store/storetest"
)

// These tests need no root and no QEMU: the NBD server and the disk
// model, against a small client speaking the protocol from the other
// side, so that the lab test's harness is itself tested.

// nbdClient is the client side of the protocol, for tests.
type nbdClient struct {
	conn   io.ReadWriter
	cookie uint64
	size   uint64
	flags  uint16
}

// newNBDClient does the handshake, choosing the export with NBD_OPT_GO
// (or NBD_OPT_EXPORT_NAME if exportName).
func newNBDClient(conn io.ReadWriter, exportName bool) (*nbdClient, error) {
	var hello [18]byte
	if _, err := io.ReadFull(conn, hello[:]); err != nil {
		return nil, err
	}
	if binary.BigEndian.Uint64(hello[0:]) != nbdMagic || binary.BigEndian.Uint64(hello[8:]) != nbdOptMagic {
		return nil, fmt.Errorf("bad hello %x", hello)
	}
	if err := binary.Write(conn, binary.BigEndian, uint32(nbdFlagCFixedNewstyle|nbdFlagCNoZeroes)); err != nil {
		return nil, err
	}
	c := &nbdClient{conn: conn}
	// An option the server does not know comes first, as QEMU's
	// structured-reply request does.
	if err := c.option(8, nil); err != nil {
		return nil, err
	}
	if typ, _, err := c.optionReply(); err != nil || typ != nbdRepErrUnsup {
		return nil, fmt.Errorf("unknown option: reply %#x, %v; want NBD_REP_ERR_UNSUP", typ, err)
	}
	if exportName {
		if err := c.option(nbdOptExportName, []byte("disk")); err != nil {
			return nil, err
		}
		var b [10]byte
		if _, err := io.ReadFull(conn, b[:]); err != nil {
			return nil, err
		}
		c.size, c.flags = binary.BigEndian.Uint64(b[0:]), binary.BigEndian.Uint16(b[8:])
		return c, nil
	}
	data := binary.BigEndian.AppendUint32(nil, 4)
	data = append(data, "disk"...)
	data = binary.BigEndian.AppendUint16(data, 0)
	if err := c.option(nbdOptGo, data); err != nil {
		return nil, err
	}
	for {
		typ, body, err := c.optionReply()
		if err != nil {
			return nil, err
		}
		switch typ {
		case nbdRepInfo:
			if len(body) != 12 || binary.BigEndian.Uint16(body) != nbdInfoExport {
				return nil, fmt.Errorf("info %x", body)
			}
			c.size, c.flags = binary.BigEndian.Uint64(body[2:]), binary.BigEndian.Uint16(body[10:])
		case nbdRepAck:
			return c, nil
		default:
			return nil, fmt.Errorf("NBD_OPT_GO: reply %#x", typ)
		}
	}
}

func (c *nbdClient) option(opt uint32, data []byte) error {
	b := binary.BigEndian.AppendUint64(nil, nbdOptMagic)
	b = binary.BigEndian.AppendUint32(b, opt)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	_, err := c.conn.Write(append(b, data...))
	return err
}

func (c *nbdClient) optionReply() (typ uint32, data []byte, err error) {
	var h [20]byte
	if _, err := io.ReadFull(c.conn, h[:]); err != nil {
		return 0, nil, err
	}
	if binary.BigEndian.Uint64(h[0:]) != nbdReplyMagic {
		return 0, nil, fmt.Errorf("reply magic %x", h[:8])
	}
	data = make([]byte, binary.BigEndian.Uint32(h[16:]))
	_, err = io.ReadFull(c.conn, data)
	return binary.BigEndian.Uint32(h[12:]), data, err
}

// do sends one request and reads its simple reply, with n bytes of data
// for a successful read.
func (c *nbdClient) do(cmd, flags uint16, off uint64, length uint32, payload []byte, n int) ([]byte, uint32, error) {
	c.cookie++
	b := binary.BigEndian.AppendUint32(nil, nbdRequestMagic)
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint16(b, cmd)
	b = binary.BigEndian.AppendUint64(b, c.cookie)
	b = binary.BigEndian.AppendUint64(b, off)
	b = binary.BigEndian.AppendUint32(b, length)
	if _, err := c.conn.Write(append(b, payload...)); err != nil {
		return nil, 0, err
	}
	if cmd == nbdCmdDisc {
		return nil, 0, nil
	}
	var h [16]byte
	if _, err := io.ReadFull(c.conn, h[:]); err != nil {
		return nil, 0, err
	}
	if binary.BigEndian.Uint32(h[0:]) != nbdSimpleReply || binary.BigEndian.Uint64(h[8:]) != c.cookie {
		return nil, 0, fmt.Errorf("reply %x to cookie %d", h, c.cookie)
	}
	errno := binary.BigEndian.Uint32(h[4:])
	if errno != 0 || n == 0 {
		return nil, errno, nil
	}
	data := make([]byte, n)
	_, err := io.ReadFull(c.conn, data)
	return data, 0, err
}

func (c *nbdClient) write(off int64, data []byte, fua bool) (uint32, error) {
	var flags uint16
	if fua {
		flags = nbdCmdFlagFUA
	}
	_, errno, err := c.do(nbdCmdWrite, flags, uint64(off), uint32(len(data)), data, 0)
	return errno, err
}

func (c *nbdClient) read(off int64, n int) ([]byte, uint32, error) {
	return c.do(nbdCmdRead, 0, uint64(off), uint32(n), nil, n)
}

func (c *nbdClient) flush() error {
	_, errno, err := c.do(nbdCmdFlush, 0, 0, 0, nil, 0)
	if err == nil && errno != 0 {
		err = fmt.Errorf("flush: error %d", errno)
	}
	return err
}

// startNBD serves disk over an in-memory connection and returns the
// client end, after the handshake, and the server's result.
func startNBD(t *testing.T, disk *volatileDisk, exportName bool) (*nbdClient, <-chan error) {
	t.Helper()
	srvConn, cliConn := net.Pipe()
	t.Cleanup(func() { srvConn.Close(); cliConn.Close() })
	done := make(chan error, 1)
	s := &nbdServer{disk: disk}
	go func() { done <- s.serve(srvConn) }()
	c, err := newNBDClient(cliConn, exportName)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return c, done
}

func pattern(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

// TestNBDServer: both ways of choosing the export, the export's size and
// flags, reads that return what was written, EINVAL past the end, and a
// clean end on NBD_CMD_DISC.
func TestNBDServer(t *testing.T) {
	for _, exportName := range []bool{false, true} {
		t.Run(fmt.Sprintf("exportName=%v", exportName), func(t *testing.T) {
			disk := newVolatileDisk(make([]byte, 16*blockSize), 0)
			c, done := startNBD(t, disk, exportName)
			if c.size != uint64(disk.size()) || c.flags != exportFlags {
				t.Fatalf("export: size %d flags %#x; want %d %#x", c.size, c.flags, disk.size(), exportFlags)
			}
			if errno, err := c.write(blockSize+100, pattern('a', 5000), false); err != nil || errno != 0 {
				t.Fatalf("write: %d %v", errno, err)
			}
			got, errno, err := c.read(blockSize, 2*blockSize)
			if err != nil || errno != 0 {
				t.Fatalf("read: %d %v", errno, err)
			}
			want := append(append(pattern(0, 100), pattern('a', 5000)...), pattern(0, 2*blockSize-5100)...)
			if !bytes.Equal(got, want) {
				t.Errorf("read back differs from what was written")
			}
			if errno, err := c.write(disk.size()-10, pattern('b', 20), false); err != nil || errno != nbdEINVAL {
				t.Errorf("write past the end: %d %v; want EINVAL", errno, err)
			}
			if _, errno, err := c.read(disk.size(), 1); err != nil || errno != nbdEINVAL {
				t.Errorf("read past the end: %d %v; want EINVAL", errno, err)
			}
			if _, errno, err := c.do(4 /* NBD_CMD_TRIM, not advertised */, 0, 0, blockSize, nil, 0); err != nil || errno != nbdEINVAL {
				t.Errorf("trim: %d %v; want EINVAL", errno, err)
			}
			if err := c.flush(); err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.do(nbdCmdDisc, 0, 0, 0, nil, 0); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Errorf("serve after NBD_CMD_DISC: %v; want nil", err)
			}
		})
	}
}

// TestNBDServerRefuses: a client that breaks the protocol ends the
// connection with an error that says how.
func TestNBDServerRefuses(t *testing.T) {
	hello := func(flags uint32) []byte { return binary.BigEndian.AppendUint32(nil, flags) }
	opt := func(magic uint64, opt, n uint32) []byte {
		b := binary.BigEndian.AppendUint64(nil, magic)
		b = binary.BigEndian.AppendUint32(b, opt)
		return binary.BigEndian.AppendUint32(b, n)
	}
	goExport := append(append(hello(nbdFlagCFixedNewstyle|nbdFlagCNoZeroes), opt(nbdOptMagic, nbdOptGo, 6)...), 0, 0, 0, 0, 0, 0)
	tests := []struct {
		name, in, want string
	}{
		{"unknown client flag", string(hello(1 << 5)), "unknown client flags"},
		{"bad option magic", string(hello(1)) + string(opt(1, nbdOptGo, 0)), "option magic"},
		{"option too long", string(hello(1)) + string(opt(nbdOptMagic, nbdOptGo, maxOptionLen+1)), "too long"},
		{"bad request magic", string(goExport) + string(make([]byte, requestLen)), "request magic"},
		{"write too large", string(goExport) + string(binary.BigEndian.AppendUint32(
			append(binary.BigEndian.AppendUint32(nil, nbdRequestMagic), 0, 0, 0, nbdCmdWrite, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
			maxPayload+1)), "write of"},
		{"truncated", string(goExport) + "\x25\x60", "request"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &nbdServer{disk: newVolatileDisk(make([]byte, blockSize), 0)}
			err := s.serve(struct {
				io.Reader
				io.Writer
			}{bytes.NewReader([]byte(tc.in)), io.Discard})
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Errorf("serve = %v; want an error about %q", err, tc.want)
			}
		})
	}
}

// TestCrashImages checks the disk model against what a power cut may
// leave: the flushed state, plus any of the writes since (whole, or torn
// at sectors), except FUA writes, which are always kept; and the lying
// media, which loses what it was told to flush.
func TestCrashImages(t *testing.T) {
	disk := newVolatileDisk(make([]byte, 4*blockSize), 2)
	c, _ := startNBD(t, disk, false)
	must := func(errno uint32, err error) {
		t.Helper()
		if err != nil || errno != 0 {
			t.Fatalf("write: %d %v", errno, err)
		}
	}
	must(c.write(0, pattern('A', blockSize), false))
	if err := c.flush(); err != nil { // the lying media skips this one
		t.Fatal(err)
	}
	must(c.write(0, pattern('B', blockSize), false))
	must(c.write(blockSize, pattern('C', blockSize), true))
	must(c.write(2*blockSize, pattern('D', blockSize), false))

	block := func(img []byte, b int) []byte { return img[b*blockSize : (b+1)*blockSize] }
	rng := rand.New(rand.NewPCG(1, 2))
	honest, lying := disk.crash(false, crashNone, rng), disk.crash(true, crashNone, rng)
	img := disk.materialize(honest)
	if !bytes.Equal(block(img, 0), pattern('A', blockSize)) || !bytes.Equal(block(img, 1), pattern('C', blockSize)) ||
		!bytes.Equal(block(img, 2), pattern(0, blockSize)) {
		t.Errorf("crash %s: want A (flushed), C (FUA), zeros (lost)", crashNone)
	}
	if honest.lost != 2 {
		t.Errorf("crash %s lost %d writes; want 2", crashNone, honest.lost)
	}
	img = disk.materialize(lying)
	if !bytes.Equal(block(img, 0), pattern(0, blockSize)) || !bytes.Equal(block(img, 1), pattern('C', blockSize)) {
		t.Errorf("lying disk, crash %s: want its flush of A lost, C (FUA) kept", crashNone)
	}

	honest = disk.crash(false, crashAll, rng)
	if img := disk.materialize(honest); !bytes.Equal(img, disk.cur) {
		t.Errorf("crash %s differs from what reads return", crashAll)
	}
	// The file the lab test mounts holds the same bytes.
	for _, img := range []crashImage{honest, lying} {
		p := filepath.Join(t.TempDir(), "disk.raw")
		if err := disk.writeImage(img, p); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, disk.materialize(img)) {
			t.Errorf("writeImage wrote other bytes than the image (%v)", err)
		}
	}

	// Torn: each sector of block 0 is A's or B's, and over many cuts
	// both are seen.
	seen := map[byte]bool{}
	for range 20 {
		honest := disk.crash(false, crashSectors, rng)
		img := disk.materialize(honest)
		for s := 0; s < blockSize; s += sectorSize {
			sec := img[s : s+sectorSize]
			if !bytes.Equal(sec, pattern(sec[0], sectorSize)) || (sec[0] != 'A' && sec[0] != 'B') {
				t.Fatalf("crash %s: sector %d is neither A's nor B's", crashSectors, s/sectorSize)
			}
			seen[sec[0]] = true
		}
	}
	if !seen['A'] || !seen['B'] {
		t.Errorf("crash %s over 20 cuts saw sectors of %v; want both A and B", crashSectors, seen)
	}

	if err := c.flush(); err != nil { // performed by both
		t.Fatal(err)
	}
	honest, lying = disk.crash(false, crashNone, rng), disk.crash(true, crashNone, rng)
	if !bytes.Equal(disk.materialize(honest), disk.cur) || !bytes.Equal(disk.materialize(lying), disk.cur) {
		t.Errorf("after a flush both media hold everything")
	}
}

// FuzzNBDServer feeds the server arbitrary client bytes. It must never
// panic or touch memory outside the disk, and whatever was written, the
// disk model keeps its invariant: the media plus every cached write, in
// order, is what reads return.
func FuzzNBDServer(f *testing.F) {
	// A well-formed session: NBD_OPT_GO, a write, a FUA write, a flush, a
	// read, a disconnect.
	var session bytes.Buffer
	session.Write(binary.BigEndian.AppendUint32(nil, nbdFlagCFixedNewstyle|nbdFlagCNoZeroes))
	session.Write(binary.BigEndian.AppendUint64(nil, nbdOptMagic))
	session.Write(binary.BigEndian.AppendUint32(nil, nbdOptGo))
	session.Write(binary.BigEndian.AppendUint32(nil, 6))
	session.Write(make([]byte, 6))
	req := func(flags, cmd uint16, off uint64, n uint32, payload []byte) {
		b := binary.BigEndian.AppendUint32(nil, nbdRequestMagic)
		b = binary.BigEndian.AppendUint16(b, flags)
		b = binary.BigEndian.AppendUint16(b, cmd)
		b = binary.BigEndian.AppendUint64(b, 7)
		b = binary.BigEndian.AppendUint64(b, off)
		b = binary.BigEndian.AppendUint32(b, n)
		session.Write(append(b, payload...))
	}
	req(0, nbdCmdWrite, 10, 600, pattern('x', 600))
	req(nbdCmdFlagFUA, nbdCmdWrite, 4000, 200, pattern('y', 200))
	req(0, nbdCmdFlush, 0, 0, nil)
	req(0, nbdCmdWrite, 1000, 100, pattern('z', 100))
	req(0, nbdCmdRead, 0, 4096, nil)
	req(0, nbdCmdDisc, 0, 0, nil)
	f.Add(session.Bytes())
	// The older way of choosing the export.
	f.Add(append(binary.BigEndian.AppendUint32(nil, 1), opt(nbdOptExportName, "x")...))
	f.Fuzz(func(t *testing.T, in []byte) {
		disk := newVolatileDisk(make([]byte, 2*blockSize), 3)
		s := &nbdServer{disk: disk}
		err := s.serve(struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(in), io.Discard})
		if err != nil {
			t.Logf("serve: %v", err) // most inputs break the protocol somewhere
		}
		if len(disk.cur) != 2*blockSize {
			t.Fatalf("disk is %d bytes", len(disk.cur))
		}
		rng := rand.New(rand.NewPCG(1, 1))
		honest, lying := disk.crash(false, crashAll, rng), disk.crash(true, crashAll, rng)
		if !bytes.Equal(disk.materialize(honest), disk.cur) || !bytes.Equal(disk.materialize(lying), disk.cur) {
			t.Fatal("media plus every cached write differ from what reads return")
		}
	})
}

func opt(o uint32, data string) []byte {
	b := binary.BigEndian.AppendUint64(nil, nbdOptMagic)
	b = binary.BigEndian.AppendUint32(b, o)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// TestJudge: the checks of a crash image against the acknowledged writes,
// each rule with an image that keeps it and one that breaks it.
func TestJudge(t *testing.T) {
	// One name's life: create (rv 2), update (rv 5), delete; a second
	// name created at rv 3. Acks in that order: seq 1 … 4.
	hw := func(token string, rv uint64) model.Object {
		h := storetest.Hardware("default", strings.Split(token, ".")[0])
		ud := storetest.ChurnUserData(token)
		h.Labels, h.Spec.UserData, h.ResourceVersion = map[string]string{storetest.ChurnLabel: token}, &ud, strconv.FormatUint(rv, 10)
		return h
	}
	h := &history{byKey: map[string][]ack{}}
	for _, a := range []ack{
		{op: storetest.OpCreate, key: "default/a", token: "a.0", rev: 2, present: true},
		{op: storetest.OpCreate, key: "default/b", token: "b.0", rev: 3, present: true},
		{op: storetest.OpUpdate, key: "default/a", token: "a.1", rev: 5, present: true},
		{op: storetest.OpDelete, key: "default/a", token: "a.2"},
	} {
		a.seq = len(h.acks) + 1
		h.acks = append(h.acks, a)
		h.byKey[a.key] = append(h.byKey[a.key], a)
	}
	audited := func(tokens ...string) map[string]bool {
		m := map[string]bool{}
		for _, tk := range tokens {
			m[tk] = true
		}
		return m
	}
	objs := func(o ...model.Object) map[string]model.Object {
		m := map[string]model.Object{}
		for _, x := range o {
			m[x.GetObjectMeta().Key()] = x
		}
		return m
	}
	tests := []struct {
		name                      string
		acks                      int
		st                        imageState
		lost, auditLost, problems int
	}{
		{"acknowledged create kept", 2, imageState{revision: 3, hardware: objs(hw("a.0", 2), hw("b.0", 3)), audit: audited("a.0", "b.0")}, 0, 0, 0},
		{"a later write kept too", 2, imageState{revision: 5, hardware: objs(hw("a.1", 5), hw("b.0", 3)), audit: audited("a.0", "b.0", "a.1")}, 0, 0, 0},
		{"the delete after it may be in", 3, imageState{revision: 6, hardware: objs(hw("b.0", 3)), audit: audited("a.0", "b.0", "a.1")}, 0, 0, 0},
		{"acknowledged update lost", 3, imageState{revision: 5, hardware: objs(hw("a.0", 2), hw("b.0", 3)), audit: audited("a.0", "b.0", "a.1")}, 1, 0, 0},
		{"acknowledged delete lost", 4, imageState{revision: 6, hardware: objs(hw("a.1", 5), hw("b.0", 3)), audit: audited("a.0", "b.0", "a.1", "a.2")}, 1, 0, 0},
		// The case a lenient check misses: the create is gone, and the
		// delete that came later would explain the gap, but the counter
		// shows the delete cannot be in.
		{"acknowledged create lost, not hidden by its later delete", 1, imageState{revision: 1, hardware: objs(), audit: audited("a.0")}, 1, 0, 1},
		{"value torn", 2, imageState{revision: 3, hardware: objs(hw("a.0", 2), func() model.Object {
			o := hw("b.0", 3).(*model.Hardware)
			ud := "torn"
			o.Spec.UserData = &ud
			return o
		}()), audit: audited("a.0", "b.0")}, 1, 0, 0},
		{"audit record lost", 2, imageState{revision: 3, hardware: objs(hw("a.0", 2), hw("b.0", 3)), audit: audited("a.0")}, 0, 1, 0},
		{"not a snapshot: a write above the counter", 1, imageState{revision: 2, hardware: objs(hw("a.0", 2), hw("b.0", 3)), audit: audited("a.0")}, 0, 0, 1},
		{"a name never written", 0, imageState{revision: 3, hardware: objs(hw("a.0", 2), hw("b.0", 3), hw("c.0", 3)), audit: audited()}, 0, 0, 1},
		{"an image that did not mount", 4, imageState{problems: []string{"mount: bad superblock"}}, 0, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := judge(tc.st, h, tc.acks)
			if len(v.lost) != tc.lost || v.auditLost != tc.auditLost || len(v.problems) != tc.problems {
				t.Errorf("judge = lost %q, audit records lost %d, problems %q; want %d, %d, %d",
					v.lost, v.auditLost, v.problems, tc.lost, tc.auditLost, tc.problems)
			}
			if v.failed() != (tc.lost+tc.auditLost+tc.problems > 0) {
				t.Errorf("failed() = %v", v.failed())
			}
		})
	}
}

package bolt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
	"github.com/anvilproj/anvil/internal/store/storetest"
)

func segments(t *testing.T, dbPath string) []string {
	t.Helper()
	segs, _, err := listSegments(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	return segs
}

// copyStore copies the store file and its log segments, as a crash at this
// moment would leave them, into a new directory.
func copyStore(t *testing.T, dbPath string) string {
	t.Helper()
	dir := t.TempDir()
	for _, p := range append([]string{dbPath}, segments(t, dbPath)...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(p)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, filepath.Base(dbPath))
}

// hardwareRVs lists the stored Hardware's resourceVersions by key.
func hardwareRVs(t *testing.T, s *Store) map[string]string {
	t.Helper()
	objs, _, err := s.List(t.Context(), model.KindHardware, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, o := range objs {
		out[o.GetObjectMeta().Key()] = o.GetObjectMeta().ResourceVersion
	}
	return out
}

// TestWALReplay: writes acknowledged but still only in the log (no
// checkpoint yet) are there after a crash, for the store and CheckFile.
func TestWALReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "anvil.db")
	s := openTest(t, path, Options{})
	ctx := t.Context()
	for i := range 20 {
		if _, err := s.Create(ctx, storetest.Hardware("ns", fmt.Sprintf("m%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, model.KindHardware, "ns", "m3", ""); err != nil {
		t.Fatal(err)
	}
	h, err := s.Get(ctx, model.KindHardware, "ns", "m4")
	if err != nil {
		t.Fatal(err)
	}
	h.GetObjectMeta().Labels = map[string]string{"updated": "yes"}
	if _, err := s.Update(ctx, h); err != nil {
		t.Fatal(err)
	}
	want := hardwareRVs(t, s)
	crashed := copyStore(t, path)
	if n := len(segments(t, crashed)); n != 1 {
		t.Fatalf("%d log segments, want 1 (no checkpoint yet)", n)
	}

	c, err := CheckFile(crashed)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Objects[model.KindHardware]) != len(want) || c.Revision != 22 {
		t.Errorf("CheckFile: %d Hardware at revision %d, want %d at 22", len(c.Objects[model.KindHardware]), c.Revision, len(want))
	}

	r := openTest(t, crashed, Options{})
	got := hardwareRVs(t, r)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after replay: %v\nwant %v", got, want)
	}
	m4, err := r.Get(ctx, model.KindHardware, "ns", "m4")
	if err != nil || m4.GetObjectMeta().Labels["updated"] != "yes" {
		t.Errorf("m4 after replay: %v, %v", m4, err)
	}
	// Open folded the log into bbolt and started a fresh segment.
	if segs := segments(t, crashed); len(segs) != 1 || !strings.HasSuffix(segs[0], "0000000000000002") {
		t.Errorf("segments after replay: %v", segs)
	}
	next, err := r.Create(ctx, storetest.Hardware("ns", "after"))
	if err != nil {
		t.Fatal(err)
	}
	if rv := next.GetObjectMeta().ResourceVersion; rv != "23" {
		t.Errorf("first write after replay at %s, want 23", rv)
	}
}

// TestWALTornTail: a last frame cut short or damaged (the process died in
// its write, before its fsync) is dropped, and everything before it kept;
// damage in a segment that a newer one follows is an error naming it.
func TestWALTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "anvil.db")
	s := openTest(t, path, Options{})
	for i := range 5 {
		if _, err := s.Create(t.Context(), storetest.Hardware("ns", fmt.Sprintf("m%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
	}{
		{"cut in the payload", func(b []byte) []byte { return b[:len(b)-10] }},
		{"cut in the header", func(b []byte) []byte { return append(b, 0x40, 0, 0) }},
		{"flipped byte", func(b []byte) []byte { b[len(b)-3] ^= 0x55; return b }},
		{"zeroed tail", func(b []byte) []byte { return append(b, make([]byte, 4096)...) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crashed := copyStore(t, path)
			seg := segments(t, crashed)[0]
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(seg, tc.damage(b), 0o600); err != nil {
				t.Fatal(err)
			}
			// Appended garbage leaves all five; damage to the last
			// frame loses m4 alone.
			want := 4
			if strings.Contains(tc.name, "header") || strings.Contains(tc.name, "zeroed") {
				want = 5
			}
			c, err := CheckFile(crashed)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(c.Objects[model.KindHardware]); n != want {
				t.Errorf("CheckFile: %d Hardware, want %d", n, want)
			}
			r := openTest(t, crashed, Options{})
			if n := len(hardwareRVs(t, r)); n != want {
				t.Errorf("after replay: %d Hardware, want %d", n, want)
			}
		})
	}

	t.Run("damage before a newer segment", func(t *testing.T) {
		crashed := copyStore(t, path)
		seg := segments(t, crashed)[0]
		b, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		b[frameHeader+2] ^= 0x55 // the first frame
		if err := os.WriteFile(seg, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(segmentPath(crashed, 9), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(crashed, Options{}); err == nil || !strings.Contains(err.Error(), seg) {
			t.Errorf("Open = %v; want an error naming %s", err, seg)
		}
		if _, err := CheckFile(crashed); err == nil || !strings.Contains(err.Error(), seg) {
			t.Errorf("CheckFile = %v; want an error naming %s", err, seg)
		}
	})
}

// TestWALCheckpoints: with small segments, concurrent writers cause many
// checkpoints while they write; every segment but the current one is
// folded into bbolt and removed, Close leaves none, and the reopened
// store and CheckFile hold exactly what was acknowledged.
func TestWALCheckpoints(t *testing.T) {
	path := filepath.Join(t.TempDir(), "anvil.db")
	s, err := Open(path, Options{WALSegmentBytes: 8 << 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var mu sync.Mutex
	want := map[string]string{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				name := fmt.Sprintf("g%d-m%d", g, i)
				o, err := s.Create(ctx, storetest.Hardware("ns", name))
				if err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					o.GetObjectMeta().Labels = map[string]string{"n": "2"}
					if o, err = s.Update(ctx, o); err != nil {
						t.Error(err)
						return
					}
				}
				mu.Lock()
				want["ns/"+name] = o.GetObjectMeta().ResourceVersion
				mu.Unlock()
				if i%5 == 0 {
					if err := s.Delete(ctx, model.KindHardware, "ns", name, ""); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					delete(want, "ns/"+name)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if n := len(segments(t, path)); n > 3 {
		t.Errorf("%d segments while open; want at most the current one and one being checkpointed", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.ckptStats.checkpoints < 3 {
		t.Errorf("%d checkpoints; the test meant to cause many", s.ckptStats.checkpoints)
	}
	if segs := segments(t, path); len(segs) != 0 {
		t.Errorf("segments after Close: %v", segs)
	}
	c, err := CheckFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Objects[model.KindHardware]) != len(want) {
		t.Errorf("CheckFile: %d Hardware, want %d", len(c.Objects[model.KindHardware]), len(want))
	}
	r := openTest(t, path, Options{})
	if got := hardwareRVs(t, r); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after reopen:\n%v\nwant\n%v", got, want)
	}
}

// TestWALUnexpectedFile: a file that looks like a segment but is not named
// as one is refused, not ignored (it may be a segment renamed by hand).
func TestWALUnexpectedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "anvil.db")
	if err := os.WriteFile(path+walInfix+"12", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "anvil.db.wal.12") {
		t.Errorf("Open = %v; want an error naming anvil.db.wal.12", err)
	}
}

// frame builds one log frame as appendFrame lays it out.
func frame(rev uint64, recs ...walRecord) []byte {
	p := binary.LittleEndian.AppendUint64(nil, rev)
	p = binary.AppendUvarint(p, uint64(len(recs)))
	for _, r := range recs {
		p = append(p, r.op)
		p = binary.AppendUvarint(p, uint64(len(r.kind)))
		p = append(p, r.kind...)
		p = binary.AppendUvarint(p, uint64(len(r.key)))
		p = append(p, r.key...)
		if r.op == opPut {
			p = binary.AppendUvarint(p, uint64(len(r.val)))
			p = append(p, r.val...)
		}
	}
	h := binary.LittleEndian.AppendUint32(nil, uint32(len(p)))
	h = binary.LittleEndian.AppendUint32(h, crc32.Checksum(p, castagnoli))
	return append(h, p...)
}

// FuzzReadFrames: any segment contents are read without panicking; what is
// read is a prefix of whole frames, each of which decodes to records whose
// values lie inside the file at the offsets given.
func FuzzReadFrames(f *testing.F) {
	two := append(frame(7, walRecord{op: opPut, kind: "Hardware", key: "ns/a", val: []byte(`{"x":1}`)}),
		frame(8, walRecord{op: opDelete, kind: "Hardware", key: "ns/a"})...)
	f.Add(two)
	f.Add(two[:len(two)-1])
	f.Add([]byte{})
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "seg")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := readFrames(path, func(rev uint64, recs []walRecord) error {
			for _, r := range recs {
				if r.op != opPut && r.op != opDelete {
					t.Fatalf("record op %d delivered", r.op)
				}
				if r.op == opPut && !bytes.Equal(data[r.valOff:r.valOff+int64(len(r.val))], r.val) {
					t.Fatalf("value of %s at offset %d is not the file's bytes there", r.key, r.valOff)
				}
			}
			return nil
		})
		if err != nil && !strings.Contains(err.Error(), "malformed") && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("readFrames: %v", err)
		}
	})
}

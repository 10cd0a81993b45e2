package bolt

// The write-ahead log: how a write becomes durable.
//
// A commit group is one frame appended to the current segment file and one
// fdatasync, and its callers are answered after that; the bbolt file is
// brought up to date later, a segment at a time (a checkpoint), by a
// goroutine of its own. Before, every group was a bbolt transaction: it
// rewrote each touched object's pages (a workflow of ~5 KB is a node of two
// pages, allocated anew per commit), its branch pages and the meta page,
// and fsynced twice. Now a group costs a sequential write of the JSON the
// committer has encoded anyway, and one fsync; and an object written many
// times between two checkpoints reaches bbolt once.
//
// Files: next to the bbolt file at path, segments named path + ".wal." +
// a 16-digit hexadecimal sequence number, oldest first. Every segment but
// the newest is complete; the newest may end in a torn frame (the process
// died in its write or before its fsync), which no caller was told had
// been stored.
//
// Frame: payload length (uint32 LE), CRC-32C of the payload (uint32 LE),
// payload. Payload: the revision counter after the group (uint64 LE), the
// record count (uvarint), then records: op (1 put, 2 delete), kind and key
// (each a uvarint length and the bytes), and for a put the object's JSON
// (uvarint length and bytes). A record is the key's state after the group,
// so replaying frames in order, from any point at or before the first
// frame that is not yet in bbolt, yields the same state: a checkpoint that
// died halfway leaves a state that replaying its segment again repairs.
//
// Open replays every segment into bbolt (one transaction), removes them and
// starts a new one; Close checkpoints the current one, so a store closed
// cleanly leaves no segment behind. CheckFile reads the segments too.

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

const (
	walInfix      = ".wal."
	frameHeader   = 8
	opPut         = 1
	opDelete      = 2
	maxFrameBytes = 1 << 30 // a length above this is a torn or corrupt header, not a frame

	// defaultWALSegmentBytes: a segment is checkpointed into bbolt once it
	// holds this much. Larger means fewer bbolt writes of an object written
	// often (an agent's workflow is written ~15 times in its life) and more
	// to replay at Open; at ~5 KB per workflow write, 128 MiB is ~25,000
	// writes.
	defaultWALSegmentBytes = 128 << 20
	// checkpointTxKeys bounds one checkpoint transaction, and so the
	// values it holds in memory at once; a checkpoint of a large segment
	// is several transactions (see the replay rule above).
	checkpointTxKeys = 2000
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// walRef is where a key's latest state in a segment is: its value's offset
// and length, or a deletion.
type walRef struct {
	off     int64
	n       int
	deleted bool
}

// walPending is a record of the frame being written, entered into its
// segment's dirty keys once the frame is durable.
type walPending struct {
	k   ovKey
	ref walRef
}

// segment is one WAL file. The committer appends to the newest; an older
// one belongs to the checkpointer.
type segment struct {
	path  string
	f     *os.File
	size  int64
	rev   uint64 // revision after its last frame
	dirty map[ovKey]walRef
}

func segmentPath(dbPath string, seq uint64) string {
	return fmt.Sprintf("%s%s%016x", dbPath, walInfix, seq)
}

// listSegments returns the WAL segments of dbPath, oldest first, and the
// highest sequence number (0 if none).
func listSegments(dbPath string) (paths []string, last uint64, err error) {
	dir, base := filepath.Split(dbPath)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, fmt.Errorf("list write-ahead log segments: %w", err)
	}
	type seg struct {
		seq  uint64
		path string
	}
	var segs []seg
	for _, e := range ents {
		suffix, ok := strings.CutPrefix(e.Name(), base+walInfix)
		if !ok {
			continue
		}
		seq, err := strconv.ParseUint(suffix, 16, 64)
		if err != nil || len(suffix) != 16 {
			return nil, 0, fmt.Errorf("write-ahead log: unexpected file %s next to the store", filepath.Join(dir, e.Name()))
		}
		segs = append(segs, seg{seq, filepath.Join(dir, e.Name())})
	}
	slices.SortFunc(segs, func(a, b seg) int { return cmp.Compare(a.seq, b.seq) })
	for _, s := range segs {
		paths = append(paths, s.path)
		last = s.seq
	}
	return paths, last, nil
}

// createSegment creates an empty segment and makes its name durable, so
// that frames acknowledged in it cannot vanish with the directory entry.
func createSegment(path string) (*segment, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create write-ahead log segment: %w", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		f.Close()
		return nil, err
	}
	return &segment{path: path, f: f, dirty: map[ovKey]walRef{}}, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// walRecord is one decoded record.
type walRecord struct {
	op        byte
	kind, key string
	val       []byte // for a put; aliases the frame's buffer
	valOff    int64  // the value's offset in its file
}

// readFrames calls fn for every whole, intact frame of the segment at
// path, in order, with the frame's revision and records. A frame that is
// cut short or fails its checksum ends the segment: torn reports it, and
// the caller decides whether a torn segment is allowed (only the newest).
func readFrames(path string, fn func(rev uint64, recs []walRecord) error) (torn bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var off int64
	var hdr [frameHeader]byte
	var payload []byte
	var recs []walRecord
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return false, nil
			}
			if err == io.ErrUnexpectedEOF {
				return true, nil
			}
			return false, err
		}
		n := binary.LittleEndian.Uint32(hdr[0:])
		if n == 0 || n > maxFrameBytes {
			return true, nil
		}
		if cap(payload) < int(n) {
			payload = make([]byte, n)
		}
		payload = payload[:n]
		if _, err := io.ReadFull(r, payload); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return true, nil
			}
			return false, err
		}
		if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(hdr[4:]) {
			return true, nil
		}
		rev, recs, err := decodeFrame(payload, off+frameHeader, recs[:0])
		if err != nil {
			// The checksum matched, so this is not a torn write.
			return false, fmt.Errorf("%s at offset %d: %w", path, off, err)
		}
		if err := fn(rev, recs); err != nil {
			return false, err
		}
		off += frameHeader + int64(n)
	}
}

func decodeFrame(p []byte, base int64, recs []walRecord) (uint64, []walRecord, error) {
	bad := errors.New("malformed write-ahead log frame")
	if len(p) < 8 {
		return 0, nil, bad
	}
	rev := binary.LittleEndian.Uint64(p)
	i := 8
	count, w := binary.Uvarint(p[i:])
	if w <= 0 {
		return 0, nil, bad
	}
	i += w
	bytesAt := func() ([]byte, int64, bool) {
		l, w := binary.Uvarint(p[i:])
		if w <= 0 || l > uint64(len(p)-i-w) {
			return nil, 0, false
		}
		start := i + w
		i = start + int(l)
		return p[start:i], base + int64(start), true
	}
	for range count {
		if i >= len(p) {
			return 0, nil, bad
		}
		rec := walRecord{op: p[i]}
		i++
		kind, _, ok1 := bytesAt()
		key, _, ok2 := bytesAt()
		if !ok1 || !ok2 {
			return 0, nil, bad
		}
		rec.kind, rec.key = string(kind), string(key)
		switch rec.op {
		case opPut:
			var ok bool
			if rec.val, rec.valOff, ok = bytesAt(); !ok {
				return 0, nil, bad
			}
		case opDelete:
		default:
			return 0, nil, fmt.Errorf("write-ahead log record op %d: %w", rec.op, bad)
		}
		recs = append(recs, rec)
	}
	if i != len(p) {
		return 0, nil, bad
	}
	return rev, recs, nil
}

// replaySegments reads every segment of dbPath in order and calls fn with
// each intact frame; only the newest segment may end torn.
func replaySegments(dbPath string, fn func(rev uint64, recs []walRecord) error) (segs []string, last uint64, err error) {
	segs, last, err = listSegments(dbPath)
	if err != nil {
		return nil, 0, err
	}
	for i, p := range segs {
		torn, err := readFrames(p, fn)
		if err != nil {
			return nil, 0, fmt.Errorf("replay write-ahead log: %w", err)
		}
		if torn && i < len(segs)-1 {
			return nil, 0, fmt.Errorf("replay write-ahead log: %s is damaged before its end, and a newer segment follows it", p)
		}
	}
	return segs, last, nil
}

// recover brings the bbolt file up to date with the segments a previous
// process left (it crashed, or could not checkpoint), in one transaction,
// then removes them. It returns the next segment's sequence number.
func (s *Store) recover(dbPath string) (uint64, error) {
	tx, err := s.db.Begin(true)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	if err := createBuckets(tx); err != nil {
		return 0, err
	}
	var rev uint64
	segs, last, err := replaySegments(dbPath, func(r uint64, recs []walRecord) error {
		rev = max(rev, r)
		for _, rec := range recs {
			b := tx.Bucket([]byte(rec.kind))
			if b == nil {
				return fmt.Errorf("write-ahead log names kind %q, which the store does not have", rec.kind)
			}
			var err error
			if rec.op == opPut {
				// bbolt keeps the slice until Commit; the frame's
				// buffer is reused for the next frame.
				err = b.Put([]byte(rec.key), slices.Clone(rec.val))
			} else {
				err = b.Delete([]byte(rec.key))
			}
			if err != nil {
				return fmt.Errorf("%s %s: %w", rec.kind, rec.key, err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if len(segs) == 0 {
		return 1, nil
	}
	if err := putRevision(tx, rev); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	for _, p := range segs {
		if err := os.Remove(p); err != nil {
			return 0, fmt.Errorf("remove replayed write-ahead log segment: %w", err)
		}
	}
	s.log.Info("store: replayed the write-ahead log", "segments", len(segs), "revision", rev)
	return last + 1, syncDir(filepath.Dir(dbPath))
}

// putRevision raises the stored revision counter to rev (it never goes
// back: a replayed older frame must not lower it).
func putRevision(tx *bolt.Tx, rev uint64) error {
	mb := tx.Bucket(metaBucket)
	if v := mb.Get(revisionKey); len(v) == 8 && binary.BigEndian.Uint64(v) >= rev {
		return nil
	}
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], rev)
	return mb.Put(revisionKey, v[:])
}

// appendFrame writes the final state of every key a commit group touched,
// and the revision counter, as one frame, and fsyncs. Only the committer
// calls it. After a failure the segment may hold part of a frame, so every
// later write fails too (s.walErr): the store must be reopened.
func (s *Store) appendFrame(overlay map[ovKey]*entry, rev uint64) error {
	if s.walErr != nil {
		return s.walErr
	}
	seg := s.seg
	buf := append(s.walBuf[:0], make([]byte, frameHeader)...)
	buf = binary.LittleEndian.AppendUint64(buf, rev)
	buf = binary.AppendUvarint(buf, uint64(len(overlay)))
	refs := s.walRefs[:0]
	for k, e := range overlay {
		op := byte(opPut)
		if e == nil {
			op = opDelete
		}
		buf = append(buf, op)
		buf = binary.AppendUvarint(buf, uint64(len(k.kc.kind)))
		buf = append(buf, k.kc.kind...)
		buf = binary.AppendUvarint(buf, uint64(len(k.key)))
		buf = append(buf, k.key...)
		if e == nil {
			refs = append(refs, walPending{k, walRef{deleted: true}})
			continue
		}
		buf = binary.AppendUvarint(buf, uint64(len(e.raw)))
		refs = append(refs, walPending{k, walRef{off: seg.size + int64(len(buf)), n: len(e.raw)}})
		buf = append(buf, e.raw...)
	}
	payload := buf[frameHeader:]
	if len(payload) > maxFrameBytes {
		return fmt.Errorf("a commit group of %d bytes exceeds the write-ahead log's frame limit", len(payload))
	}
	binary.LittleEndian.PutUint32(buf[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(buf[4:], crc32.Checksum(payload, castagnoli))
	t0 := time.Now()
	if _, err := seg.f.WriteAt(buf, seg.size); err != nil {
		s.walErr = fmt.Errorf("write-ahead log write failed (reopen the store): %w", err)
		return s.walErr
	}
	t1 := time.Now()
	if err := datasync(seg.f); err != nil {
		s.walErr = fmt.Errorf("write-ahead log fsync failed (reopen the store): %w", err)
		return s.walErr
	}
	s.stats.walWrite += t1.Sub(t0)
	s.stats.fsync += time.Since(t1)
	seg.size += int64(len(buf))
	seg.rev = rev
	for _, p := range refs {
		seg.dirty[p.k] = p.ref
	}
	// Keep the buffers for the next group, unless one huge group (an
	// Apply of many objects) grew them.
	if cap(buf) <= 8<<20 {
		s.walBuf = buf
	}
	clear(refs)
	s.walRefs = refs[:0]
	// This group is durable whatever happens next: a failed checkpoint
	// found here sets s.walErr (logged), which fails the next group, not
	// this one.
	_ = s.maybeRotate()
	return nil
}

// maybeRotate hands a full segment to the checkpointer and starts a new
// one. If the previous checkpoint is still running it keeps appending,
// and waits for it only once the segment is twice its size, so that the
// log cannot outgrow bbolt without bound.
func (s *Store) maybeRotate() error {
	if s.seg.size < s.segLimit {
		return nil
	}
	if s.ckptBusy {
		if s.seg.size < 2*s.segLimit {
			select {
			case err := <-s.ckptDone:
				s.ckptBusy = false
				if err != nil {
					return s.checkpointFailed(err)
				}
			default:
				return nil
			}
		} else {
			s.ckptBusy = false
			if err := <-s.ckptDone; err != nil {
				return s.checkpointFailed(err)
			}
		}
	}
	next, err := createSegment(segmentPath(s.path, s.nextSeq))
	if err != nil {
		// The current segment stays in use; try again after the next group.
		s.log.Error("store: cannot start a new write-ahead log segment", "err", err)
		return nil
	}
	s.nextSeq++
	old := s.seg
	s.seg = next
	s.ckptBusy = true
	s.ckptQueue <- old
	return nil
}

func (s *Store) checkpointFailed(err error) error {
	// A later segment must not be checkpointed over this one (replay
	// order), so writing stops until the store is reopened, which
	// replays every segment left.
	s.walErr = fmt.Errorf("store checkpoint failed (reopen the store; no acknowledged write is lost): %w", err)
	s.log.Error("store checkpoint failed", "err", err)
	return s.walErr
}

// checkpointer writes the segments the committer hands it into bbolt, in
// order, and removes them.
func (s *Store) checkpointer() {
	defer close(s.ckptStopped)
	for seg := range s.ckptQueue {
		s.ckptDone <- s.checkpoint(seg)
	}
}

// checkpoint writes seg's latest state of every key it holds into bbolt,
// in transactions of at most checkpointTxKeys keys, the revision counter
// with the last one, then removes the segment.
func (s *Store) checkpoint(seg *segment) error {
	start := time.Now()
	keys := make([]ovKey, 0, len(seg.dirty))
	for k := range seg.dirty {
		keys = append(keys, k)
	}
	// bbolt writes sorted keys fastest (each leaf is visited once).
	slices.SortFunc(keys, func(a, b ovKey) int {
		if c := cmp.Compare(a.kc.kind, b.kc.kind); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	for lo := 0; lo < len(keys) || lo == 0; lo += checkpointTxKeys {
		chunk := keys[lo:min(lo+checkpointTxKeys, len(keys))]
		last := lo+checkpointTxKeys >= len(keys)
		err := s.db.Update(func(tx *bolt.Tx) error {
			for _, k := range chunk {
				ref := seg.dirty[k]
				b := tx.Bucket([]byte(k.kc.kind))
				if ref.deleted {
					if err := b.Delete([]byte(k.key)); err != nil {
						return err
					}
					continue
				}
				val := make([]byte, ref.n)
				if _, err := seg.f.ReadAt(val, ref.off); err != nil {
					return fmt.Errorf("read %s %s back from the write-ahead log: %w", k.kc.kind, k.key, err)
				}
				if err := b.Put([]byte(k.key), val); err != nil {
					return fmt.Errorf("%s %s: %w", k.kc.kind, k.key, err)
				}
			}
			if last {
				return putRevision(tx, seg.rev)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if err := seg.f.Close(); err != nil {
		return err
	}
	if err := os.Remove(seg.path); err != nil {
		return err
	}
	s.ckptStats.checkpoints++
	s.ckptStats.keys += int64(len(keys))
	s.ckptStats.bytes += seg.size
	s.ckptStats.time += time.Since(start)
	return syncDir(filepath.Dir(seg.path))
}

// closeWAL is Close's part: wait for a running checkpoint, then checkpoint
// the current segment (or just remove it, if empty).
func (s *Store) closeWAL() error {
	close(s.ckptQueue)
	var errs []error
	if s.ckptBusy {
		errs = append(errs, <-s.ckptDone)
		s.ckptBusy = false
	}
	<-s.ckptStopped
	if s.walErr == nil && errors.Join(errs...) == nil {
		errs = append(errs, s.checkpoint(s.seg))
	} else {
		// Leave the segments for the next Open to replay.
		errs = append(errs, s.walErr, s.seg.f.Close())
	}
	return errors.Join(errs...)
}

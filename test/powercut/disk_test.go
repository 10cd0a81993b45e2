package powercut

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
)

// The disk's geometry: the guest's filesystem writes 4 KiB blocks; a
// power cut may tear a write at any 512-byte sector (what a disk with
// 512-byte sectors promises to write whole, and no more).
const (
	blockSize  = 4096
	sectorSize = 512
)

// write is one write the disk acknowledged. data is the disk's own copy
// and is never changed.
type write struct {
	off  int64
	data []byte
	// fua: written with Force Unit Access, so on the media when it was
	// acknowledged.
	fua bool
}

// media is what a disk has really written: base overlaid with blocks,
// plus the writes it holds in its volatile cache until a flush.
type media struct {
	blocks  map[int64][]byte // block index -> contents; a block is replaced, never changed
	pending []*write         // acknowledged since the last flush this media performed, in order
	dirty   map[int64]bool   // blocks pending touches
}

func newMedia() *media {
	return &media{blocks: map[int64][]byte{}, dirty: map[int64]bool{}}
}

func (m *media) add(w *write) {
	m.pending = append(m.pending, w)
	for b := w.off / blockSize; b*blockSize < w.off+int64(len(w.data)); b++ {
		m.dirty[b] = true
	}
}

// writeBack puts the cache on the media: cur is then what the media holds.
func (m *media) writeBack(cur []byte) {
	for b := range m.dirty {
		m.blocks[b] = slices.Clone(cur[b*blockSize : (b+1)*blockSize])
	}
	m.pending = nil
	clear(m.dirty)
}

// Crash modes: which of the writes still in a disk's volatile cache reach
// the media when the power goes.
const (
	crashNone    = "none"    // none of them: the media as of the last flush
	crashAll     = "all"     // every one
	crashWrites  = "writes"  // each write whole or not at all, independently
	crashSectors = "sectors" // each 512-byte sector of each write independently
)

var crashModes = []string{crashNone, crashAll, crashWrites, crashSectors}

// fragment is a piece of a write that a crash image keeps.
type fragment struct {
	off  int64
	data []byte
}

// crashImage is the disk's contents after a power cut: base overlaid with
// blocks, then with frags in order.
type crashImage struct {
	mode   string
	blocks map[int64][]byte
	frags  []fragment
	// lost counts the cached writes (whole or in part) the cut dropped.
	lost int
}

// crash returns what the media would hold if the power went now, under
// mode; rng chooses the writes (or sectors) that survive. Writes made
// with FUA always survive. The image shares blocks and write data with
// the media, which never change them.
func (m *media) crash(mode string, rng *rand.Rand) crashImage {
	img := crashImage{mode: mode, blocks: maps.Clone(m.blocks)}
	for _, w := range m.pending {
		switch {
		case w.fua || mode == crashAll || mode == crashWrites && rng.IntN(2) == 0:
			img.frags = append(img.frags, fragment{w.off, w.data})
			continue
		case mode == crashSectors:
			kept := 0
			for s := 0; s < len(w.data); s += sectorSize {
				if rng.IntN(2) == 0 {
					img.frags = append(img.frags, fragment{w.off + int64(s), w.data[s:min(s+sectorSize, len(w.data))]})
					kept++
				}
			}
			if kept*sectorSize >= len(w.data) {
				continue
			}
		}
		img.lost++
	}
	return img
}

// volatileDisk is a disk with a volatile write cache, as the NBD server
// exports it: a write is acknowledged at once but reaches the media only
// with the next flush (or at once with FUA). It keeps two media: the
// honest one, which performs every flush, and a lying one, which
// acknowledges every flush but performs only every lieEvery-th (0: none
// of them): the disk that loses acknowledged writes, with which the test
// proves it can see a loss. Both see the same writes and give the same
// answers, so one guest run serves both. It is safe for concurrent use.
type volatileDisk struct {
	mu       sync.Mutex
	base     []byte  // the image the disk started with; never changed
	baseUsed []int64 // the blocks of base that are not all zero
	cur      []byte  // what reads return: base and every write, in order
	honest   *media
	lying    *media
	lieEvery int

	writes, fuaWrites, flushes int64
}

func newVolatileDisk(base []byte, lieEvery int) *volatileDisk {
	if len(base)%blockSize != 0 {
		panic(fmt.Sprintf("disk of %d bytes is not a whole number of blocks", len(base)))
	}
	d := &volatileDisk{base: base, cur: slices.Clone(base), honest: newMedia(), lying: newMedia(), lieEvery: lieEvery}
	zero := make([]byte, blockSize)
	for b := int64(0); b*blockSize < int64(len(base)); b++ {
		if !bytes.Equal(base[b*blockSize:(b+1)*blockSize], zero) {
			d.baseUsed = append(d.baseUsed, b)
		}
	}
	return d
}

func (d *volatileDisk) size() int64 { return int64(len(d.base)) }

// inRange reports whether [off, off+n) lies within the disk.
func (d *volatileDisk) inRange(off int64, n uint32) bool {
	return off >= 0 && off <= d.size() && int64(n) <= d.size()-off
}

func (d *volatileDisk) read(off int64, p []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	copy(p, d.cur[off:])
}

// write takes data (which the disk keeps).
func (d *volatileDisk) write(off int64, data []byte, fua bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	copy(d.cur[off:], data)
	w := &write{off: off, data: data, fua: fua}
	d.honest.add(w)
	d.lying.add(w)
	d.writes++
	if fua {
		d.fuaWrites++
	}
}

func (d *volatileDisk) flush() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.flushes++
	d.honest.writeBack(d.cur)
	if d.lieEvery > 0 && d.flushes%int64(d.lieEvery) == 0 {
		d.lying.writeBack(d.cur)
	}
}

// crash returns the image the honest disk (or, if lying, the lying one)
// would leave if the power went now (see media.crash).
func (d *volatileDisk) crash(lying bool, mode string, rng *rand.Rand) crashImage {
	d.mu.Lock()
	defer d.mu.Unlock()
	if lying {
		return d.lying.crash(mode, rng)
	}
	return d.honest.crash(mode, rng)
}

// materialize returns img's bytes.
func (d *volatileDisk) materialize(img crashImage) []byte {
	out := slices.Clone(d.base)
	for b, data := range img.blocks {
		copy(out[b*blockSize:], data)
	}
	for _, f := range img.frags {
		copy(out[f.off:], f.data)
	}
	return out
}

// writeImage writes img to a new file at path. Blocks that are zero in
// the base image and untouched since are left as holes.
func (d *volatileDisk) writeImage(img crashImage, path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	werr := func() error {
		if err := f.Truncate(d.size()); err != nil {
			return err
		}
		for _, b := range d.baseUsed {
			if _, over := img.blocks[b]; !over {
				if _, err := f.WriteAt(d.base[b*blockSize:(b+1)*blockSize], b*blockSize); err != nil {
					return err
				}
			}
		}
		for b, data := range img.blocks {
			if _, err := f.WriteAt(data, b*blockSize); err != nil {
				return err
			}
		}
		for _, fr := range img.frags {
			if _, err := f.WriteAt(fr.data, fr.off); err != nil {
				return err
			}
		}
		return nil
	}()
	return errors.Join(werr, f.Close())
}

package model

import (
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestOutOfBandBound: lists over OOBMaxItems and strings over
// OOBMaxString are cut (a string on a rune boundary), each cut named
// once in Truncated; what is within the caps is left as it is.
func TestOutOfBandBound(t *testing.T) {
	o := &OutOfBand{Model: strings.Repeat("€", 200), SerialNumber: "ok",
		Drives: make([]OOBDrive, 10000), Memory: make([]OOBMemory, OOBMaxItems)}
	long := strings.Repeat("s", 1<<20) // one megabyte, shared by every drive
	for i := range o.Drives {
		o.Drives[i].SerialNumber = long
	}
	o.Bound()
	if len(o.Model) > OOBMaxString || !utf8.ValidString(o.Model) || len(o.Model) != 255 {
		t.Errorf("model cut to %d bytes, valid %v; want 255 (85 three-byte runes)", len(o.Model), utf8.ValidString(o.Model))
	}
	if len(o.Drives) != OOBMaxItems || len(o.Memory) != OOBMaxItems || o.SerialNumber != "ok" {
		t.Errorf("drives %d, memory %d, serial %q", len(o.Drives), len(o.Memory), o.SerialNumber)
	}
	if want := []string{"model", "drives", "drives[].strings"}; !reflect.DeepEqual(o.Truncated, want) {
		t.Errorf("truncated = %q; want %q", o.Truncated, want)
	}
	o.Bound() // again: nothing more to cut, nothing named twice
	if len(o.Truncated) != 3 {
		t.Errorf("truncated after a second Bound = %q", o.Truncated)
	}
}

// TestIdentityMismatch: only identities both sides state are compared,
// case aside.
func TestIdentityMismatch(t *testing.T) {
	a := &Attributes{Product: &Product{SerialNumber: "ABC"}, Anvil: &AnvilAttributes{UUID: "u-1"},
		OutOfBand: &OutOfBand{SerialNumber: "abc", UUID: "U-2"}}
	if got := a.IdentityMismatch(); !reflect.DeepEqual(got, []string{`UUID: agent "u-1", BMC "U-2"`}) {
		t.Errorf("mismatch = %q", got)
	}
	a.OutOfBand.UUID = ""
	if got := a.IdentityMismatch(); got != nil {
		t.Errorf("a UUID the BMC does not state: %q", got)
	}
	if got := (&Attributes{Product: &Product{SerialNumber: "X"}}).IdentityMismatch(); got != nil {
		t.Errorf("no out-of-band inventory: %q", got)
	}
}

// TestOutOfBandSameContent: when it was read does not count.
func TestOutOfBandSameContent(t *testing.T) {
	a := &OutOfBand{Source: OutOfBandSource{Machine: "m", ReadAt: time.Unix(1, 0)}, Model: "R640"}
	b := *a
	b.Source.ReadAt = time.Unix(2, 0)
	if !a.SameContent(&b) {
		t.Error("differs by readAt alone: not the same")
	}
	b.Model = "R650"
	if a.SameContent(&b) || a.SameContent(nil) {
		t.Error("a different model, or none: the same")
	}
}

// FuzzOutOfBandBound: whatever a BMC says, the bounded inventory is
// within the caps, and valid UTF-8 stays valid.
func FuzzOutOfBandBound(f *testing.F) {
	f.Add("PowerEdge R640", "7XK2Q53", 2, 300)
	f.Add(strings.Repeat("é", 200), "", 70, 0)
	f.Fuzz(func(t *testing.T, model, serial string, drives, nics int) {
		drives, nics = max(0, min(drives, 1000)), max(0, min(nics, 1000))
		o := &OutOfBand{Model: model, SerialNumber: serial, Drives: make([]OOBDrive, drives), EthernetInterfaces: make([]OOBEthernet, nics)}
		for i := range o.Drives {
			o.Drives[i].Model = model + serial
		}
		o.Bound()
		for _, s := range []string{o.Model, o.SerialNumber} {
			if len(s) > OOBMaxString {
				t.Fatalf("a string of %d bytes kept", len(s))
			}
		}
		if len(o.Drives) > OOBMaxItems || len(o.EthernetInterfaces) > OOBMaxItems {
			t.Fatalf("%d drives, %d NICs kept", len(o.Drives), len(o.EthernetInterfaces))
		}
		if utf8.ValidString(model) && !utf8.ValidString(o.Model) {
			t.Fatalf("valid UTF-8 %q cut into invalid %q", model, o.Model)
		}
	})
}

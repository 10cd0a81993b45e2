package ipxe

import (
	"bytes"
	"crypto/sha256"
	"debug/pe"
	"encoding/hex"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestBinariesMatchREADME keeps binaries/README.md honest: every embedded
// file is listed there with its SHA-256, and nothing else is embedded.
func TestBinariesMatchREADME(t *testing.T) {
	readme, err := os.ReadFile("binaries/README.md")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := fs.ReadDir(Binaries(), ".")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		b, err := fs.ReadFile(Binaries(), e.Name())
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if !strings.Contains(string(readme), "`"+hex.EncodeToString(sum[:])+"`") {
			t.Errorf("binaries/README.md lacks the SHA-256 of %s (%x); run make ipxe-refresh", e.Name(), sum)
		}
	}
	want := []string{BinaryEFIARM64, BinaryEFIx8664, BinarySNPOnly, BinaryBIOS}
	if !slices.Equal(names, want) {
		t.Errorf("Binaries() holds %q; want %q", names, want)
	}
	if v := Version(); v == "" || !strings.Contains(string(readme), "ipxe "+v) {
		t.Errorf("Version() = %q, not the version binaries/README.md names", v)
	}
	if v := VersionARM64(); v == "" || !strings.Contains(string(readme), "ipxe "+v) {
		t.Errorf("VersionARM64() = %q, not a version binaries/README.md names", v)
	}
}

// TestBinaryKinds checks the files are what their names say, by magic
// number, so a refresh that copied the wrong files fails here.
func TestBinaryKinds(t *testing.T) {
	// The EFI binaries' PE machine: an x86-64 binary served to an ARM64
	// machine (or the reverse) fails in its firmware with no message.
	for name, machine := range map[string]uint16{
		BinaryEFIx8664: pe.IMAGE_FILE_MACHINE_AMD64,
		BinarySNPOnly:  pe.IMAGE_FILE_MACHINE_AMD64,
		BinaryEFIARM64: pe.IMAGE_FILE_MACHINE_ARM64,
	} {
		b, err := fs.ReadFile(Binaries(), name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := pe.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Errorf("%s is not a PE/COFF (EFI) image: %v", name, err)
			continue
		}
		if f.Machine != machine {
			t.Errorf("%s is for PE machine %#x; want %#x", name, f.Machine, machine)
		}
		if _, ok := f.OptionalHeader.(*pe.OptionalHeader64); !ok {
			t.Errorf("%s is not a PE32+ image", name)
		}
	}
	b, err := fs.ReadFile(Binaries(), BinaryBIOS)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 1024 || len(b) > 512*1024 {
		t.Errorf("%s is %d bytes; a PXE NBP is between 1 KiB and 512 KiB", BinaryBIOS, len(b))
	}
}

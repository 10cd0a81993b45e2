package ipxe

import (
	"crypto/sha256"
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
	want := []string{BinaryEFIx8664, BinarySNPOnly, BinaryBIOS}
	if !slices.Equal(names, want) {
		t.Errorf("Binaries() holds %q; want %q", names, want)
	}
	if v := Version(); v == "" || !strings.Contains(string(readme), "ipxe "+v) {
		t.Errorf("Version() = %q, not the version binaries/README.md names", v)
	}
}

// TestBinaryKinds checks the files are what their names say, by magic
// number, so a refresh that copied the wrong files fails here.
func TestBinaryKinds(t *testing.T) {
	for _, name := range []string{BinaryEFIx8664, BinarySNPOnly} {
		b, err := fs.ReadFile(Binaries(), name)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 2 || string(b[:2]) != "MZ" {
			t.Errorf("%s is not a PE/COFF (EFI) image", name)
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

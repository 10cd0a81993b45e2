package bootenv

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os/exec"
	"testing"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestCompressLargeArchive compresses more than a few of each format's
// blocks (LZ4's legacy frame holds 8 MiB per block) and decompresses the
// result with the reference tools, which read what the kernel reads. A
// small fixture hid that LZ4's concurrent writer keeps the caller's buffer
// after Write returns: the archive broke past 24 MiB, the kernel stopped
// unpacking half-way through /init, and exec failed with ETXTBSY.
func TestCompressLargeArchive(t *testing.T) {
	data := make([]byte, 40<<20+12345)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(data); i += 4096 {
		// A third incompressible, the rest zeros; and 12 MiB of
		// nothing but noise (compressed data in a binary), more than
		// one LZ4 block.
		if i/4096%3 == 0 || (i >= 20<<20 && i < 32<<20) {
			for j := i; j < min(i+4096, len(data)); j++ {
				data[j] = byte(rng.Uint32())
			}
		}
	}
	tools := map[string][]string{
		"lz4":     {"lz4", "-dc"},
		"zstd-19": {"zstd", "-dc"},
		"gzip":    {"gzip", "-dc"},
	}
	for spec, tool := range tools {
		rng := rand.New(rand.NewPCG(3, 4))
		t.Run(spec, func(t *testing.T) {
			testtool.RequireBinary(t, tool[0], tool[0])
			c, err := parseCompression(spec)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			w, err := c.writer(&out)
			if err != nil {
				t.Fatal(err)
			}
			// As the archive writer writes: small writes of varying
			// size from one reused buffer, one large write (a big file
			// at once), and io.Copy (the writer's ReadFrom).
			buf := make([]byte, 9000)
			third := len(data) / 3
			for off := 0; off < third; {
				n := copy(buf[:min(1+int(rng.Uint32()%9000), third-off)], data[off:])
				if _, err := w.Write(buf[:n]); err != nil {
					t.Fatal(err)
				}
				off += n
			}
			if _, err := w.Write(data[third : 2*third]); err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(w, struct{ io.Reader }{bytes.NewReader(data[2*third:])}); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(tool[0], tool[1:]...)
			cmd.Stdin = &out
			var got, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &got, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s: %v: %s", tool[0], err, stderr.String())
			}
			if !bytes.Equal(got.Bytes(), data) {
				t.Fatalf("%s gave %d bytes that differ from the %d compressed", tool[0], got.Len(), len(data))
			}
		})
	}
}

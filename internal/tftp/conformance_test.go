package tftp

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/testtool"
)

// TestConformance fetches files from an in-process server with the real
// clients PXE setups and operators use: curl, atftp (the client with
// RFC 7440 windowsize) and tftp-hpa, and compares what they wrote. atftp's
// windowsize transfers go through a recording relay (wire_test.go) that
// checks the window was granted and used: the OACK's windowsize, and each
// window's blocks sent before the client's ACK.
func TestConformance(t *testing.T) {
	curl := testtool.RequireBinary(t, "curl", "curl")
	atftp := testtool.RequireBinary(t, "atftp", "atftp")
	hpa := testtool.RequireBinary(t, "tftp", "tftp-hpa")

	dir := t.TempDir()
	files := map[string][]byte{
		"empty":    nil,
		"small":    []byte("hello\n"),
		"b512":     pattern(512),
		"b1468":    pattern(1468),
		"b4404":    pattern(3 * 1468),
		"ipxe.efi": pattern(1<<20 + 7),
		"text.txt": []byte("#!ipxe\r\ndhcp\nchain http://10.0.0.1/boot.ipxe\n\rbare CR\r\n\n"),
	}
	for name, data := range files {
		mustWriteFile(t, filepath.Join(dir, name), data)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	srv := startServer(t, Config{FS: root.FS()})
	port := strconv.Itoa(int(srv.addr.Port()))
	url := "tftp://127.0.0.1:" + port + "/"

	curlGet := func(extra ...string) func(file, out string) []string {
		return func(file, out string) []string {
			return append([]string{curl, "-sS", url + file, "-o", out}, extra...)
		}
	}
	atftpVia := func(port string, opts ...string) []string {
		args := []string{atftp}
		for _, o := range opts {
			args = append(args, "--option", o)
		}
		return append(args, "127.0.0.1", port)
	}
	atftpGet := func(opts ...string) func(file, out string) []string {
		return func(file, out string) []string {
			return append(atftpVia(port, opts...), "-g", "-r", file, "-l", out)
		}
	}
	hpaGet := func(flags ...string) func(file, out string) []string {
		return func(file, out string) []string {
			// -l: literal mode, or "52:54:…/x" reads as host "52".
			args := append([]string{hpa, "-l"}, flags...)
			return append(args, "127.0.0.1", port, "-c", "get", file, out)
		}
	}
	// atftpWindow is atftp asking for a window of n blocks, through a
	// wire that checks it was served so.
	atftpWindow := func(n int, opts ...string) func(file, out string) []string {
		return func(file, out string) []string {
			opts := append([]string{"windowsize " + strconv.Itoa(n)}, opts...)
			return append(atftpVia("WIRE", opts...), "-g", "-r", file, "-l", out)
		}
	}
	clients := []struct {
		name   string
		cmd    func(file, out string) []string
		window int // through a wire, checking the transfer was windowed so
	}{
		{"curl blksize 1468", curlGet("--tftp-blksize", "1468"), 0},
		{"curl default", curlGet(), 0},
		{"curl no options", curlGet("--tftp-no-options"), 0},
		{"atftp windowsize 16 blksize 1468", atftpWindow(16, "blksize 1468"), 16},
		{"atftp windowsize 64 blksize 1468", atftpWindow(64, "blksize 1468"), 64},
		{"atftp windowsize 3 tsize", atftpWindow(3, "tsize 0"), 3},
		{"atftp blksize 1468", atftpGet("blksize 1468"), 0},
		{"atftp blksize 8 timeout 2", atftpGet("blksize 8", "timeout 2"), 0},
		{"atftp no options", atftpGet(), 0},
		{"tftp-hpa binary", hpaGet("-m", "binary"), 0},
		{"tftp-hpa binary verbose", hpaGet("-v", "-m", "binary"), 0},
	}
	for _, cl := range clients {
		for _, file := range []string{"empty", "small", "b512", "b1468", "b4404", "ipxe.efi", "52:54:00:12:34:56/ipxe.efi"} {
			if strings.Contains(cl.name, "blksize 8") && file == "ipxe.efi" {
				continue // 131,000 round trips
			}
			t.Run(cl.name+"/"+file, func(t *testing.T) {
				out := filepath.Join(t.TempDir(), "out")
				n := srv.events.count()
				args := cl.cmd(file, out)
				var w *wire
				if cl.window > 0 {
					w = newWire(t, srv.addr)
					args[slices.Index(args, "WIRE")] = w.Port()
				}
				runClient(t, args)
				_, base, _ := strings.Cut(file, "/")
				if base == "" {
					base = file
				}
				got, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, files[base]) {
					t.Fatalf("%s wrote %d bytes; want %d (equal prefix: %v)", cl.name, len(got), len(files[base]), bytes.HasPrefix(files[base], got))
				}
				ev := srv.events.find(t, n, "RRQ "+file+" ")
				if ev.Outcome != OutcomeServed {
					t.Errorf("event = %+v; want served", ev)
				}
				if w != nil {
					// After the event: the server had the last ACK, so
					// the wire had carried it.
					w.checkWindows(t, cl.window, len(files[base]))
				}
				if strings.Contains(file, "/") && ev.MAC.String() != "52:54:00:12:34:56" {
					t.Errorf("event MAC = %v; want 52:54:00:12:34:56", ev.MAC)
				}
			})
		}
	}

	// netascii: tftp-hpa's ascii mode undoes the translation, so the file
	// comes back as it is on disk.
	t.Run("tftp-hpa ascii", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		n := srv.events.count()
		runClient(t, hpaGet("-m", "ascii")("text.txt", out))
		got, _ := os.ReadFile(out)
		if !bytes.Equal(got, files["text.txt"]) {
			t.Fatalf("got %q; want %q", got, files["text.txt"])
		}
		if ev := srv.events.find(t, n, "RRQ text.txt "); !strings.Contains(ev.Message, "netascii") {
			t.Errorf("event = %+v; want a netascii transfer", ev)
		}
	})

	// Refusals: each client reports the ERROR and writes nothing useful.
	refusals := []struct {
		name     string
		args     []string
		wantText string // in the client's output
	}{
		{"curl not found", []string{curl, "-sS", url + "nothing", "-o", "/dev/null"}, "(68)"},                    // CURLE_TFTP_NOTFOUND
		{"curl parent", []string{curl, "-sS", "--path-as-is", url + "../etc/passwd", "-o", "/dev/null"}, "(69)"}, // CURLE_TFTP_PERM
		{"curl absolute", []string{curl, "-sS", "--path-as-is", url + "/etc/passwd", "-o", "/dev/null"}, "(69)"},
		{"atftp not found", atftpGet()("nothing", "/dev/null"), "not found"},
		{"atftp parent", atftpGet()("a/../../x", "/dev/null"), "parent directory"},
		{"atftp backslash", atftpGet()("..\\..\\x", "/dev/null"), "backslash"},
		{"tftp-hpa not found", hpaGet("-m", "binary")("nothing", "/dev/null"), "Error code 1"},
		{"tftp-hpa parent", hpaGet("-m", "binary")("../etc/passwd", "/dev/null"), "Error code 2"},
		{"tftp-hpa put", []string{hpa, "127.0.0.1", port, "-c", "put", "/etc/hostname", "x"}, "Error code 2"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			n := srv.events.count()
			out := runClientFailing(t, tc.args)
			if !strings.Contains(out, tc.wantText) {
				t.Errorf("%s output %q; want %q", tc.args[0], out, tc.wantText)
			}
			ev := srv.events.find(t, n, " from ")
			if ev.Outcome != OutcomeNotFound && ev.Outcome != OutcomeRefused {
				t.Errorf("event = %+v; want not-found or refused", ev)
			}
		})
	}
}

// TestConformanceRollover: real clients follow block numbers past 65535
// (33.5 MB at 512-byte blocks); atftp's windows of 64 are checked on the
// wire across the wrap.
func TestConformanceRollover(t *testing.T) {
	if testing.Short() {
		t.Skip("33 MB transfers")
	}
	curl := testtool.RequireBinary(t, "curl", "curl")
	atftp := testtool.RequireBinary(t, "atftp", "atftp")
	data := pattern(65536*512 + 1000)
	srv := startServer(t, Config{FS: rootWith(t, "big", data)})
	port := strconv.Itoa(int(srv.addr.Port()))
	tests := []struct {
		name   string
		args   []string
		window int // through a wire, checking the transfer was windowed so
	}{
		{"atftp windowsize 64", []string{atftp, "--option", "windowsize 64", "-g", "-r", "big", "-l", "OUT", "127.0.0.1", "WIRE"}, 64},
		{"curl blksize 512", []string{curl, "-sS", "tftp://127.0.0.1:" + port + "/big", "--tftp-blksize", "512", "-o", "OUT"}, 0},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			var w *wire
			for j := range tc.args {
				switch tc.args[j] {
				case "OUT":
					tc.args[j] = out
				case "WIRE":
					w = newWire(t, srv.addr)
					tc.args[j] = w.Port()
				}
			}
			runClient(t, tc.args)
			got, _ := os.ReadFile(out)
			if !bytes.Equal(got, data) {
				t.Fatalf("got %d bytes; want %d (equal prefix: %v)", len(got), len(data), bytes.HasPrefix(data, got))
			}
			if ev := srv.events.wait(t, i+1)[i]; ev.Outcome != OutcomeServed {
				t.Errorf("event = %+v; want served", ev)
			}
			if w != nil {
				// After the event: the server had the last ACK, so the
				// wire had carried it.
				w.checkWindows(t, tc.window, len(data))
			}
		})
	}
}

// rootWith returns an os.Root FS holding data as name.
func rootWith(t *testing.T, name string, data []byte) fs.FS {
	t.Helper()
	dir := t.TempDir()
	mustWriteFile(t, filepath.Join(dir, name), data)
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root.FS()
}

func runClient(t *testing.T, args []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil || bytes.Contains(out, []byte("Error code")) {
		t.Fatalf("%q: %v\n%s", args, err, out)
	}
}

// runClientFailing runs a client expected to report an error and returns
// its output. tftp-hpa exits 0 after an ERROR, so only its output counts.
func runClientFailing(t *testing.T, args []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err == nil && !bytes.Contains(out, []byte("Error code")) {
		t.Fatalf("%q succeeded; want an error\n%s", args, out)
	}
	return string(out)
}

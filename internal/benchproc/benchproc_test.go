package benchproc

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/benchresult"
)

// TestMain lets this test binary stand in for `anvil serve` (the fake
// writes the arguments it was run with, then answers /readyz on the
// HTTP listener passed to it), so Start is tested without building anvil.
func TestMain(m *testing.M) {
	if os.Getenv("BENCHPROC_FAKE_ANVIL") == "1" {
		fakeAnvil()
		return
	}
	os.Exit(m.Run())
}

func fakeAnvil() {
	args := os.Args[1:]
	dir := args[slices.Index(args, "--data-dir")+1]
	if err := os.WriteFile(filepath.Join(filepath.Dir(dir), "argv"), []byte(strings.Join(args, "\n")), 0o644); err != nil {
		os.Exit(3)
	}
	// SIGTERM is caught before the server answers /readyz: Start returns
	// at the first answer and the test stops the server at once.
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	ln, err := net.FileListener(os.NewFile(3, "http")) // socket activation: the first file passed is HTTP
	if err != nil {
		os.Exit(4)
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })) //nolint:errcheck
	<-ch
}

// TestArgsAreWhatRan: Args is the command line the server process got —
// not the socket-activation shell in front of it — so a result file can
// name it as the server under test.
func TestArgsAreWhatRan(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "anvil")
	script := "#!/bin/sh\nBENCHPROC_FAKE_ANVIL=1 exec " + self + " \"$@\"\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, Options{Binary: bin, LogLevel: "warn", Args: []string{"--images-dir", "/x"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Cleanup(false)
	if err := s.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	got := s.Args()
	if got[0] != bin || got[1] != "serve" || !slices.Contains(got, "--images-dir") || slices.Contains(got, "/bin/sh") {
		t.Errorf("Args = %q", got)
	}
	ran, err := os.ReadFile(filepath.Join(s.Dir, "argv"))
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(got[1:], "\n"); string(ran) != want {
		t.Errorf("the server ran with\n%s\nArgs says\n%s", ran, want)
	}
	if err := benchresult.CheckServer(benchresult.Program{Name: benchresult.ServerUnderTest, Options: got}); err != nil {
		t.Errorf("a result naming Args: %v", err)
	}
}

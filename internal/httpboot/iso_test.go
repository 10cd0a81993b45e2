package httpboot

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/macaddr"
)

// TestBootISO: /iso/<mac>/anvil.iso serves Config.BootISO whatever the
// MAC (one image: it asks DHCP for the machine's script), refuses a
// malformed MAC, and is 404 when no ISO is configured.
func TestBootISO(t *testing.T) {
	iso := filepath.Join(t.TempDir(), "ipxe.iso")
	body := bytes.Repeat([]byte("CD001"), 1000)
	if err := os.WriteFile(iso, body, 0o644); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	with := New(Config{BootISO: iso, Logger: quiet})
	without := New(Config{Logger: quiet})
	get := func(h http.Handler, path string) (int, []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		b, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, b
	}
	if p := ISOPath(macaddr.MustParse("52:54:00:AB:CD:EF")); p != "/iso/52:54:00:ab:cd:ef/anvil.iso" {
		t.Fatalf("ISOPath = %s", p)
	}
	for _, mac := range []string{"52:54:00:ab:cd:ef", "52-54-00-AB-CD-01"} {
		if code, b := get(with, "/iso/"+mac+"/anvil.iso"); code != http.StatusOK || !bytes.Equal(b, body) {
			t.Errorf("%s: %d, %d bytes; want 200 and the ISO", mac, code, len(b))
		}
	}
	if code, b := get(with, "/iso/not-a-mac/anvil.iso"); code != http.StatusBadRequest || !strings.Contains(string(b), "not-a-mac") {
		t.Errorf("bad MAC: %d %q", code, b)
	}
	if code, b := get(without, "/iso/52:54:00:ab:cd:ef/anvil.iso"); code != http.StatusNotFound || !strings.Contains(string(b), "not served here") {
		t.Errorf("no ISO: %d %q", code, b)
	}
}

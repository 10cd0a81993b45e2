package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproj/anvil/internal/benchresult"
)

// TestRecordComparesAtEqualOptions: every anvil row is judged against the
// atftpd row with the same client and options, the many-clients file
// against tftpd-hpa too, and a windowsize row never against a peer row
// without it.
func TestRecordComparesAtEqualOptions(t *testing.T) {
	cfg := config{anvil: "/nonexistent/anvil", atftpd: "/nonexistent/atftpd", bigSize: 64 * mib, smallSize: mib, clients: 100, results: t.TempDir()}
	big, small := sizeName(cfg.bigSize)+" × 1", sizeName(cfg.smallSize)+" × 100"
	servers := []*server{
		{name: "anvil", argv: []string{"bin/anvil", "serve", "--tftp-port", "6969"}},
		{name: "tftpd-hpa", argv: []string{"in.tftpd", "-L"}},
		{name: "atftpd", argv: []string{"atftpd", "--daemon"}},
	}
	mk := func(test, client, server string, window int, mibps float64) *row {
		return &row{Test: test, Client: client, Server: server, Window: window, MiBps: mibps, Transfers: 3, Ratio: mibps / 40,
			samples: []sample{{mibps: mibps}}}
	}
	rows := []*row{
		mk(big, "atftp blksize 1468", "anvil", 0, 36),
		mk(big, "atftp blksize 1468", "tftpd-hpa", 0, 35),
		mk(big, "atftp blksize 1468", "atftpd", 0, 40),
		mk(big, "atftp blksize 1468 windowsize 64", "anvil", 64, 226),
		mk(big, "atftp blksize 1468 windowsize 64", "atftpd", 64, 111),
		mk(small, "atftp blksize 1468", "anvil", 0, 60),
		mk(small, "atftp blksize 1468", "tftpd-hpa", 0, 50),
		mk(small, "atftp blksize 1468", "atftpd", 0, 55),
	}
	if err := record(benchresult.New("tftp"), cfg, servers, rows); err != nil {
		t.Fatal(err)
	}
	r, err := benchresult.Read(filepath.Join(cfg.results, "tftp.json"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]benchresult.Goal{}
	for _, g := range r.Goals {
		got[g.Measure] = g
	}
	for measure, want := range map[string]struct {
		met  bool
		peer string
	}{
		"MiB/s, 64 MiB × 1, atftp blksize 1468, same options as atftpd":                                 {false, "40.0 MiB/s"},
		"MiB/s, 64 MiB × 1, atftp blksize 1468 windowsize 64, same options as atftpd":                   {true, "111.0 MiB/s"},
		"MiB/s, 1 MiB × 100, atftp blksize 1468, same options as atftpd":                                {true, "55.0 MiB/s"},
		"MiB/s, 1 MiB × 100, atftp blksize 1468, same options as tftpd-hpa":                             {true, "50.0 MiB/s"},
		"MiB/s, 64 MiB × 1, atftp blksize 1468 windowsize 64, over the fastest peer without windowsize": {true, ""},
		"failed transfers from anvil, every row":                                                        {true, ""},
	} {
		g, ok := got[measure]
		if !ok || g.Met != want.met || !strings.HasPrefix(g.Peer, want.peer) {
			t.Errorf("%s: %+v (present %v), want met %v, peer %q", measure, g, ok, want.met, want.peer)
		}
	}
	if len(r.Goals) != 6 {
		t.Errorf("%d goals, want 6 (no tftpd-hpa goal for the big file, no windowsize row against a peer without it): %+v", len(r.Goals), r.Goals)
	}
	if r.Server.Options[1] != "serve" || len(r.Peers) != 2 {
		t.Errorf("server %+v, peers %+v", r.Server, r.Peers)
	}
}

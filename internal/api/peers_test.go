package api_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/api"
	"github.com/anvilproj/anvil/internal/audit"
	"github.com/anvilproj/anvil/internal/logstore"
	"github.com/anvilproj/anvil/internal/peers"
)

// peerList is a fixed list of peers.
type peerList []peers.Peer

func (p peerList) Peers(context.Context) ([]peers.Peer, error) { return p, nil }

// TestPeerMerge: a replica with a peer (and a peer that is down) merges
// the peer's agent lines, unknown machines and audit records into its
// answers: in time order, a line both hold once, tail and since applied
// to the whole; the peer that is down is named in the answer's header; a
// peer's query is answered from local data only.
func TestPeerMerge(t *testing.T) {
	withAudit := func(l **audit.Log) envOptions {
		return envOptions{configure: func(c *api.Config) {
			a, err := audit.Open(filepath.Join(t.TempDir(), "audit.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			c.Audit, *l = a, a
		}}
	}
	var auditA, auditB *audit.Log
	b := newEnv(t, withAudit(&auditB))
	optsA := withAudit(&auditA)
	configureAudit := optsA.configure
	optsA.configure = func(c *api.Config) {
		configureAudit(c)
		c.Peers = peerList{{Name: "anvil-b", URL: b.url}, {Name: "anvil-down", URL: "http://127.0.0.1:1"}}
	}
	a := newEnv(t, optsA)

	t0 := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	line := func(s int, text string) logstore.Line {
		return logstore.Line{WorkflowID: "default/wf1", AgentID: "m1", Time: at(s), Stream: "stdout", Line: text}
	}
	appendTo := func(ls *logstore.Store, lines ...logstore.Line) {
		if err := ls.Append(lines...); err != nil {
			t.Fatal(err)
		}
	}
	// Both hold "three" (a volume both replicas wrote to): it is shown once.
	appendTo(a.ls, line(1, "one"), line(3, "three"), line(5, "five"))
	appendTo(b.ls, line(2, "two"), line(3, "three"), line(4, "four"), line(6, "six"))

	ctx := context.Background()
	getLogs := func(env *env, req *v1.GetLogsRequest, peerQuery bool) ([]string, []string) {
		t.Helper()
		r := connect.NewRequest(req)
		if peerQuery {
			r.Header().Set(v1.PeerQueryHeader, "1")
		}
		resp, err := env.logs.GetLogs(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range resp.Msg.GetLines() {
			got = append(got, l.GetLine())
		}
		return got, resp.Header().Values(v1.PeersUnansweredHeader)
	}
	for _, tc := range []struct {
		name      string
		req       *v1.GetLogsRequest
		peerQuery bool
		want      []string
	}{
		{"all", &v1.GetLogsRequest{WorkflowId: "default/wf1"}, false, []string{"one", "two", "three", "four", "five", "six"}},
		{"tail of the whole", &v1.GetLogsRequest{WorkflowId: "default/wf1", Tail: 3}, false, []string{"four", "five", "six"}},
		{"since", &v1.GetLogsRequest{WorkflowId: "default/wf1", Since: timestamppb.New(at(4))}, false, []string{"four", "five", "six"}},
		{"since and tail", &v1.GetLogsRequest{WorkflowId: "default/wf1", Since: timestamppb.New(at(2)), Tail: 2}, false, []string{"five", "six"}},
		{"a peer's query: local only", &v1.GetLogsRequest{WorkflowId: "default/wf1"}, true, []string{"one", "three", "five"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, unanswered := getLogs(a, tc.req, tc.peerQuery)
			if !slices.Equal(got, tc.want) {
				t.Errorf("GetLogs = %q; want %q", got, tc.want)
			}
			switch {
			case tc.peerQuery && len(unanswered) != 0:
				t.Errorf("a peer's query asked the peers: unanswered %q", unanswered)
			case !tc.peerQuery && (len(unanswered) != 1 || !strings.HasPrefix(unanswered[0], "anvil-down (http://127.0.0.1:1): ")):
				t.Errorf("%s = %q; want anvil-down named", v1.PeersUnansweredHeader, unanswered)
			}
		})
	}

	// An unknown machine heard by both: its newest line, from either.
	appendTo(a.ls, logstore.Line{Machine: "02:00:00:00:00:01", Time: at(1), Stream: "dhcp", Line: "DISCOVER at a"},
		logstore.Line{Machine: "02:00:00:00:00:02", Time: at(2), Stream: "dhcp", Line: "DISCOVER at a"})
	appendTo(b.ls, logstore.Line{Machine: "02:00:00:00:00:01", Time: at(7), Stream: "dhcp", Line: "DISCOVER at b"})
	for _, tc := range []struct {
		limit int32
		want  []string
	}{
		{0, []string{"02:00:00:00:00:01 DISCOVER at b", "02:00:00:00:00:02 DISCOVER at a"}},
		{1, []string{"02:00:00:00:00:01 DISCOVER at b"}},
	} {
		resp, err := a.logs.ListUnknownMachines(ctx, connect.NewRequest(&v1.ListUnknownMachinesRequest{Limit: tc.limit}))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range resp.Msg.GetMachines() {
			got = append(got, m.GetMachine()+" "+m.GetLast().GetLine())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ListUnknownMachines(limit %d) = %q; want %q", tc.limit, got, tc.want)
		}
	}

	for i, l := range []*audit.Log{auditA, auditB, auditA} {
		if err := l.Append(audit.Record{Time: at(10 + i), Subject: "root", Procedure: "/anvil.v1.HardwareService/Create", Object: "name=n" + string(rune('0'+i)), Outcome: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := a.aud.List(ctx, connect.NewRequest(&v1.ListAuditRequest{Limit: 2}))
	if err != nil {
		t.Fatal(err)
	}
	var objs []string
	for _, r := range resp.Msg.GetRecords() {
		objs = append(objs, r.GetObject())
	}
	if want := []string{"name=n1", "name=n2"}; !slices.Equal(objs, want) {
		t.Errorf("audit List(limit 2) = %q; want the newest two of both replicas, oldest first: %q", objs, want)
	}
	if u := resp.Header().Values(v1.PeersUnansweredHeader); len(u) != 1 {
		t.Errorf("audit List: %s = %q; want anvil-down named", v1.PeersUnansweredHeader, u)
	}
}

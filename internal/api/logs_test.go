package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/bootlog"
	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/machinelog"
)

// TestMachineLogs reads machine records written the way anvil serve writes
// them (network service events through a bootlog.Recorder) together with
// the agent's streamed lines.
func TestMachineLogs(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	t0 := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	mac := macaddr.MustParse

	rec := bootlog.New(bootlog.Config{Store: e.st, Logs: e.ls, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rec.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Recorder.Run: %v", err)
		}
	}()
	record := func(evs ...machinelog.Event) {
		t.Helper()
		for _, ev := range evs {
			rec.Record(ev)
		}
		if err := rec.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// node1 tries to boot before its Hardware exists, ...
	record(machinelog.Event{Time: at(0), Service: "dhcp", MAC: mac("3c:ec:ef:00:00:01"), Outcome: "unknown-mac", Message: "DISCOVER: no Hardware"})
	if _, err := e.hw.Create(ctx, connect.NewRequest(&v1.CreateHardwareRequest{
		Hardware: &v1.Hardware{Metadata: meta("node1", nil), Spec: mustStruct(t, hwSpec)}})); err != nil {
		t.Fatal(err)
	}
	// ... then boots (the cache still says unknown for up to its TTL, so
	// these go in by IP: the Hardware's reserved 10.0.0.10) and runs its
	// workflow; and two unknown machines show up.
	record(
		machinelog.Event{Time: at(1), Service: "tftp", IP: netip.MustParseAddr("10.0.0.10"), Outcome: "served", Message: "RRQ ipxe.efi"},
		machinelog.Event{Time: at(3), Service: "syslog", IP: netip.MustParseAddr("10.0.0.10"), Outcome: "received", Message: "info node1 anvil: agent up"},
		machinelog.Event{Time: at(4), Service: "syslog", IP: netip.MustParseAddr("10.0.0.99"), Outcome: "unparsed", Message: "netconsole line"},
		machinelog.Event{Time: at(5), Service: "dhcp", MAC: mac("02:00:00:00:00:99"), Outcome: "unknown-mac", Message: "DISCOVER: no Hardware"},
	)
	stream := e.ag.StreamLogs(ctx)
	for _, l := range []*v1.LogLine{
		{WorkflowId: "default/wf1", AgentId: "3c:ec:ef:00:00:01", TaskName: "os", ActionName: "write", Time: timestamppb.New(at(2)), Stream: "stdout", Line: "writing"},
		// An agent cannot write into a machine record.
		{WorkflowId: "default/wf1", AgentId: "3c:ec:ef:00:00:01", Time: timestamppb.New(at(6)), Stream: "stdout", Line: "done", Hardware: "default/node1", Machine: "02:00:00:00:00:99"},
	} {
		if err := stream.Send(l); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stream.CloseAndReceive(); err != nil {
		t.Fatal(err)
	}

	node1 := []string{
		"dhcp [unknown-mac] DISCOVER: no Hardware",
		"tftp RRQ ipxe.efi",
		"os/write writing",
		"syslog info node1 anvil: agent up",
		"agent done",
	}
	tests := []struct {
		name     string
		req      *v1.GetLogsRequest
		hardware string
		want     []string
	}{
		{name: "hardware", req: &v1.GetLogsRequest{Hardware: "node1"}, hardware: "default/node1", want: node1},
		{name: "hardware with namespace", req: &v1.GetLogsRequest{Hardware: "node1", Namespace: "default"}, hardware: "default/node1", want: node1},
		{name: "hardware tail", req: &v1.GetLogsRequest{Hardware: "node1", Tail: 2}, hardware: "default/node1", want: node1[3:]},
		{name: "hardware since", req: &v1.GetLogsRequest{Hardware: "node1", Since: timestamppb.New(at(2))}, hardware: "default/node1", want: node1[2:]},
		{name: "hardware since and tail", req: &v1.GetLogsRequest{Hardware: "node1", Since: timestamppb.New(at(1)), Tail: 1}, hardware: "default/node1", want: node1[4:]},
		{name: "its MAC, any spelling", req: &v1.GetLogsRequest{Mac: "3C-EC-EF-00-00-01"}, hardware: "default/node1", want: node1},
		{name: "its IP", req: &v1.GetLogsRequest{Ip: "10.0.0.10"}, hardware: "default/node1", want: node1},
		{name: "unknown MAC", req: &v1.GetLogsRequest{Mac: "02:00:00:00:00:99"}, want: []string{"dhcp [unknown-mac] DISCOVER: no Hardware"}},
		{name: "unknown IP", req: &v1.GetLogsRequest{Ip: "10.0.0.99"}, want: []string{"syslog [unparsed] netconsole line"}},
		{name: "MAC never heard of", req: &v1.GetLogsRequest{Mac: "02:00:00:00:00:01"}, want: nil},
		{name: "workflow unchanged", req: &v1.GetLogsRequest{WorkflowId: "default/wf1"}, want: []string{"os/write writing", "agent done"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := e.logs.GetLogs(ctx, connect.NewRequest(tc.req))
			if err != nil {
				t.Fatalf("GetLogs: %v", err)
			}
			var got []string
			for _, l := range r.Msg.GetLines() {
				src := strings.Trim(l.GetTaskName()+"/"+l.GetActionName(), "/")
				if src == "" {
					src = l.GetStream()
				}
				if src == "stdout" {
					src = "agent"
				}
				got = append(got, src+" "+l.GetLine())
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || r.Msg.GetHardware() != tc.hardware {
				t.Errorf("GetLogs(%v) = %q of %q\nwant %q of %q", tc.req, got, r.Msg.GetHardware(), tc.want, tc.hardware)
			}
		})
	}

	r, err := e.logs.GetLogs(ctx, connect.NewRequest(&v1.GetLogsRequest{Hardware: "node1", Tail: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if l := r.Msg.GetLines()[0]; l.GetHardware() != "default/node1" || l.GetStream() != "syslog" || !l.GetTime().AsTime().Equal(at(3)) {
		t.Errorf("a record line = %v; want hardware default/node1, stream syslog, time %v", l, at(3))
	}
	r, err = e.logs.GetLogs(ctx, connect.NewRequest(&v1.GetLogsRequest{Mac: "02:00:00:00:00:99"}))
	if err != nil {
		t.Fatal(err)
	}
	if l := r.Msg.GetLines()[0]; l.GetMachine() != "02:00:00:00:00:99" || l.GetHardware() != "" {
		t.Errorf("an unknown machine's line = %v; want machine 02:00:00:00:00:99", l)
	}

	errs := []struct {
		name string
		req  *v1.GetLogsRequest
		code connect.Code
	}{
		{name: "no such hardware", req: &v1.GetLogsRequest{Hardware: "nope"}, code: connect.CodeNotFound},
		{name: "two selectors", req: &v1.GetLogsRequest{Hardware: "node1", Mac: "02:00:00:00:00:99"}, code: connect.CodeInvalidArgument},
		{name: "machine and workflow", req: &v1.GetLogsRequest{Ip: "10.0.0.99", WorkflowId: "default/wf1"}, code: connect.CodeInvalidArgument},
		{name: "bad MAC", req: &v1.GetLogsRequest{Mac: "zz"}, code: connect.CodeInvalidArgument},
		{name: "bad IP", req: &v1.GetLogsRequest{Ip: "10.0.0"}, code: connect.CodeInvalidArgument},
		{name: "negative tail", req: &v1.GetLogsRequest{Hardware: "node1", Tail: -1}, code: connect.CodeInvalidArgument},
	}
	for _, tc := range errs {
		_, err := e.logs.GetLogs(ctx, connect.NewRequest(tc.req))
		wantCode(t, "GetLogs "+tc.name, err, tc.code)
	}

	// The unknown machines, most recent first. node1's MAC was one until
	// its Hardware was created; its old record stays listed.
	list, err := e.logs.ListUnknownMachines(ctx, connect.NewRequest(&v1.ListUnknownMachinesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range list.Msg.GetMachines() {
		got = append(got, m.GetMachine()+" "+m.GetLast().GetStream()+" "+m.GetLast().GetLine())
	}
	want := []string{
		"02:00:00:00:00:99 dhcp [unknown-mac] DISCOVER: no Hardware",
		"10.0.0.99 syslog [unparsed] netconsole line",
		"3c:ec:ef:00:00:01 dhcp [unknown-mac] DISCOVER: no Hardware",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("ListUnknownMachines = %q\nwant %q", got, want)
	}
	list, err = e.logs.ListUnknownMachines(ctx, connect.NewRequest(&v1.ListUnknownMachinesRequest{Limit: 1}))
	if err != nil || len(list.Msg.GetMachines()) != 1 {
		t.Errorf("ListUnknownMachines(limit 1) = %v, %v; want 1 machine", list, err)
	}
	_, err = e.logs.ListUnknownMachines(ctx, connect.NewRequest(&v1.ListUnknownMachinesRequest{Limit: -1}))
	wantCode(t, "ListUnknownMachines with limit -1", err, connect.CodeInvalidArgument)
}

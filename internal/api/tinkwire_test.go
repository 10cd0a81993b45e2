package api_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	tinkproto "github.com/anvilproj/anvil/api/proto"
	"github.com/anvilproj/anvil/internal/oci/ocitest"
)

// Tinkerbell's wire contract, checked against the real tink-agent: its
// protobuf descriptors (compiled into the binary by protoc-gen-go, and so
// exactly what it encodes and decodes) are summarised in
// testdata/tink-agent-descriptors.txt, and api/proto must describe the same
// messages, fields, numbers, types, enum values and methods. -update
// regenerates the summary from the binary in ../shared/tinkerbell (or
// $ANVIL_TINKERBELL_DIR).

var update = flag.Bool("update", false, "regenerate testdata/tink-agent-descriptors.txt from the tink-agent binary")

// tinkFiles are the upstream files that hold the protocol's messages.
var tinkFiles = []string{
	"get_action_request.proto", "get_action_response.proto",
	"report_action_status_request.proto", "report_action_status_response.proto",
	"workflow_service.proto",
}

const descriptorsGolden = "testdata/tink-agent-descriptors.txt"

func TestTinkWireMatchesTinkAgent(t *testing.T) {
	if *update {
		writeDescriptorsGolden(t)
	}
	want, err := os.ReadFile(descriptorsGolden)
	if err != nil {
		t.Fatal(err)
	}
	ours := summarize(protodesc.ToFileDescriptorProto(tinkproto.File_proto_workflow_proto))
	if got := strings.Join(ours, "\n") + "\n"; got != string(want) {
		t.Errorf("api/proto does not describe what tink-agent speaks:\n%s", lineDiff(string(want), got))
	}
}

// summarize lists what fixes the wire format (and Connect's JSON names) of
// fd's messages, enums and services, one line each, sorted: whatever the
// file layout, proto3 or edition 2023.
func summarize(fd *descriptorpb.FileDescriptorProto) []string {
	var out []string
	var message func(prefix string, m *descriptorpb.DescriptorProto)
	enum := func(prefix string, e *descriptorpb.EnumDescriptorProto) {
		for _, v := range e.GetValue() {
			out = append(out, fmt.Sprintf("enum %s%s value %s = %d", prefix, e.GetName(), v.GetName(), v.GetNumber()))
		}
	}
	message = func(prefix string, m *descriptorpb.DescriptorProto) {
		name := prefix + m.GetName()
		out = append(out, "message "+name)
		for _, f := range m.GetField() {
			out = append(out, fmt.Sprintf("message %s field %d %s %s %s %s json=%s", name, f.GetNumber(), f.GetName(),
				strings.TrimPrefix(f.GetLabel().String(), "LABEL_"), strings.TrimPrefix(f.GetType().String(), "TYPE_"),
				f.GetTypeName(), f.GetJsonName()))
		}
		for _, e := range m.GetEnumType() {
			enum(name+".", e)
		}
		for _, n := range m.GetNestedType() {
			message(name+".", n)
		}
	}
	pkg := fd.GetPackage() + "."
	for _, m := range fd.GetMessageType() {
		message(pkg, m)
	}
	for _, e := range fd.GetEnumType() {
		enum(pkg, e)
	}
	for _, s := range fd.GetService() {
		for _, m := range s.GetMethod() {
			out = append(out, fmt.Sprintf("service %s%s method %s(%s) returns (%s) client_streaming=%t server_streaming=%t",
				pkg, s.GetName(), m.GetName(), m.GetInputType(), m.GetOutputType(), m.GetClientStreaming(), m.GetServerStreaming()))
		}
	}
	sort.Strings(out)
	return out
}

// writeDescriptorsGolden finds tinkFiles' serialized FileDescriptorProtos in
// the tink-agent binary (protoc-gen-go embeds each as a byte string that
// starts with field 1, the file's name) and writes their summary.
func writeDescriptorsGolden(t *testing.T) {
	bin := ocitest.UpstreamProgram(t, "tink-agent.xz")
	var lines []string
	for _, name := range tinkFiles {
		fd := findFileDescriptor(bin, name)
		if fd == nil {
			t.Fatalf("no descriptor of %s in tink-agent.xz", name)
		}
		lines = append(lines, summarize(fd)...)
	}
	sort.Strings(lines)
	if err := os.WriteFile(descriptorsGolden, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// findFileDescriptor returns the descriptor of the file name embedded in
// bin. It reads fields from the start of "\x0a<len>name" for as long as
// they are fields a FileDescriptorProto has (the string constant's end is
// not marked), and keeps the first candidate that parses with messages,
// enums or services in it.
func findFileDescriptor(bin []byte, name string) *descriptorpb.FileDescriptorProto {
	prefix := append([]byte{0x0a, byte(len(name))}, name...)
	for off := 0; ; {
		i := bytes.Index(bin[off:], prefix)
		if i < 0 {
			return nil
		}
		start := off + i
		off = start + 1
		b := bin[start:]
		n := 0
		var seen []protowire.Number
		for n < len(b) {
			num, _, l := protowire.ConsumeField(b[n:])
			// FileDescriptorProto's fields are 1-14 and 50 (edition), in
			// field order; a repeat of a singular one or a step back past
			// the messages means the constant has ended.
			if l < 0 || num < 1 || (num > 14 && num != 50) || (len(seen) > 0 && num < seen[len(seen)-1] && num != 4 && num != 5 && num != 6) {
				break
			}
			seen = append(seen, num)
			n += l
		}
		fd := &descriptorpb.FileDescriptorProto{}
		if err := proto.Unmarshal(b[:n], fd); err != nil {
			continue
		}
		if len(fd.GetMessageType())+len(fd.GetEnumType())+len(fd.GetService()) > 0 && fd.GetName() == name {
			return fd
		}
	}
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if !slices.Contains(g, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

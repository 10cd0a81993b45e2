// Package benchfleet gives a running `anvil serve` a fleet of machines for
// the benchmarks that need one (bench/fleet, bench/storm): N Hardware, one
// 5-action Template and N Workflows, applied through ManifestService.Apply
// in chunks, and waits until the workflow engine has rendered every
// workflow. One place decides what a benchmark machine looks like, so the
// fleet and the boot storm measure the same objects.
//
// It owns those manifests and their application, not the measurements of
// either benchmark.
package benchfleet

import (
	"context"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/api/anvil/v1/anvilv1connect"
)

const (
	// ActionsPerWorkflow is how many actions TemplateYAML has.
	ActionsPerWorkflow = 5
	// Namespace holds every object of the fleet.
	Namespace = "default"
	// TemplateName names the Template every Workflow refers to.
	TemplateName = "fleet-install"
	// ChunkLabel labels each Hardware and Workflow with the Apply call
	// (chunk) it came in, so they can be listed a chunk at a time.
	ChunkLabel = "fleet-chunk"
)

// Spec describes the fleet.
type Spec struct {
	// N is the number of machines.
	N int
	// Chunk is documents per ManifestService.Apply call (one atomic,
	// durable write); a Hardware and its Workflow go in the same call.
	Chunk int
	// Netboot sets the Workflows' bootOptions.toggleAllowNetboot and
	// bootMode netboot, as in examples/workflow.yaml.
	Netboot bool
	// IP is machine i's address; Netmask and Gateway are every
	// machine's. If IP is nil, MachineIP (10.0.1.0 on, /8, gateway
	// 10.0.0.1).
	IP      func(i int) string
	Netmask string
	Gateway string
}

// Setup is how long setting the fleet up took.
type Setup struct {
	// Chunks is the number of Apply calls (and chunk labels 0..Chunks-1).
	Chunks int
	// Apply is the time of the Apply calls, Render the wait until the
	// engine had rendered every Workflow.
	Apply, Render time.Duration
}

// Apply applies the Template, then the machines in chunks, and waits until
// every Workflow is rendered and PENDING. progress, if not nil, is told
// each step.
func Apply(ctx context.Context, manifests anvilv1connect.ManifestServiceClient, workflows anvilv1connect.WorkflowServiceClient,
	s Spec, progress func(format string, args ...any)) (Setup, error) {
	if progress == nil {
		progress = func(string, ...any) {}
	}
	if s.IP == nil {
		s.IP, s.Netmask, s.Gateway = MachineIP, "255.0.0.0", "10.0.0.1"
	}
	if s.Chunk < 2 {
		return Setup{}, fmt.Errorf("benchfleet: chunk %d: want at least 2 documents per Apply (a Hardware and its Workflow)", s.Chunk)
	}
	var st Setup
	t0 := time.Now()
	if _, err := manifests.Apply(ctx, connect.NewRequest(&v1.ApplyRequest{Source: "fleet-template.yaml", Content: TemplateYAML})); err != nil {
		return st, fmt.Errorf("apply template: %w", err)
	}
	perChunk := s.Chunk / 2
	for lo := 0; lo < s.N; lo += perChunk {
		var b strings.Builder
		for i := lo; i < min(lo+perChunk, s.N); i++ {
			s.writeMachine(&b, i, st.Chunks)
		}
		if _, err := manifests.Apply(ctx, connect.NewRequest(&v1.ApplyRequest{
			Source: fmt.Sprintf("fleet-%05d.yaml", st.Chunks), Content: b.String()})); err != nil {
			return st, fmt.Errorf("apply chunk %d: %w", st.Chunks, err)
		}
		st.Chunks++
	}
	st.Apply = time.Since(t0)
	progress("applied %d Hardware + %d Workflows in %d chunks in %.2fs", s.N, s.N, st.Chunks, st.Apply.Seconds())

	t1 := time.Now()
	for {
		l, err := workflows.List(ctx, connect.NewRequest(&v1.ListRequest{Namespace: Namespace, FieldSelector: "status.state="}))
		if err != nil {
			return st, fmt.Errorf("list unrendered workflows: %w", err)
		}
		if len(l.Msg.Items) == 0 {
			break
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return st, fmt.Errorf("waiting for %d workflows to render: %w", len(l.Msg.Items), err)
		}
	}
	l, err := workflows.List(ctx, connect.NewRequest(&v1.ListRequest{Namespace: Namespace, FieldSelector: "status.state!=PENDING"}))
	if err != nil {
		return st, fmt.Errorf("list workflows: %w", err)
	}
	if len(l.Msg.Items) > 0 {
		w := l.Msg.Items[0]
		b, _ := protojson.Marshal(w.GetStatus())
		return st, fmt.Errorf("%d workflows not PENDING after rendering, e.g. %s: %s", len(l.Msg.Items), w.GetMetadata().GetName(), b)
	}
	st.Render = time.Since(t1)
	progress("rendered %d workflows in %.2fs", s.N, st.Render.Seconds())
	return st, nil
}

// TemplateYAML is a Tinkerbell template with 5 actions, in the shape of
// examples/template.yaml.
const TemplateYAML = `apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata:
  name: ` + TemplateName + `
  namespace: ` + Namespace + `
spec:
  data: |
    version: "0.1"
    name: fleet-install
    global_timeout: 3600
    tasks:
      - name: install
        worker: "{{.device_1}}"
        volumes: [/dev:/dev]
        actions:
          - name: stream-image
            image: quay.io/tinkerbell/actions/image2disk:v1.0.0
            timeout: 600
            environment:
              IMG_URL: http://10.0.0.2:7080/images/debian-12.raw.zst
              DEST_DISK: {{ index .Hardware.Disks 0 }}
              COMPRESSED: true
          - name: grow-partition
            image: quay.io/tinkerbell/actions/cexec:v1.0.0
            timeout: 90
            environment:
              BLOCK_DEVICE: {{ formatPartition (index .Hardware.Disks 0) 1 }}
              FS_TYPE: ext4
              CMD_LINE: growpart {{ index .Hardware.Disks 0 }} 1 && resize2fs {{ formatPartition (index .Hardware.Disks 0) 1 }}
          - name: hostname
            image: quay.io/tinkerbell/actions/writefile:v1.0.0
            timeout: 90
            environment:
              DEST_DISK: {{ formatPartition (index .Hardware.Disks 0) 1 }}
              FS_TYPE: ext4
              DEST_PATH: /etc/hostname
              CONTENTS: {{ .hardware.metadata.instance.hostname }}
              MODE: "0644"
              UID: "0"
              GID: "0"
          - name: network
            image: quay.io/tinkerbell/actions/writefile:v1.0.0
            timeout: 90
            environment:
              DEST_DISK: {{ formatPartition (index .Hardware.Disks 0) 1 }}
              FS_TYPE: ext4
              DEST_PATH: /etc/network/interfaces.d/eth0
              CONTENTS: "auto eth0\niface eth0 inet dhcp\n"
              MODE: "0644"
              UID: "0"
              GID: "0"
          - name: reboot
            image: ghcr.io/jacobweinstock/waitdaemon:latest
            timeout: 90
            pid: host
            command: [reboot]
`

// MAC is machine i's MAC, from the locally administered base
// 02:00:00:00:00:00. It is also the machine's agent ID (the Template's
// worker is its device_1).
func MAC(i int) string {
	return fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", byte(i>>24), byte(i>>16), byte(i>>8), byte(i))
}

// MachineIP is machine i's address in 10.0.0.0/8, from 10.0.1.0.
func MachineIP(i int) string {
	v := uint32(i) + 256
	return fmt.Sprintf("10.%d.%d.%d", byte(v>>16), byte(v>>8), byte(v))
}

// Name is machine i's Hardware name; its Workflow is Name(i)+"-install".
func Name(i int) string { return fmt.Sprintf("node-%06d", i) }

func (s Spec) writeMachine(b *strings.Builder, i, chunk int) {
	name := Name(i)
	m := MAC(i)
	fmt.Fprintf(b, `---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata:
  name: %[1]s
  namespace: %[4]s
  labels: {%[5]s: "%[6]d"}
spec:
  disks:
    - device: /dev/vda
  metadata:
    instance:
      id: %[2]s
      hostname: %[1]s
      operating_system: {distro: debian, version: "12"}
  interfaces:
    - dhcp:
        mac: %[2]s
        hostname: %[1]s
        arch: x86_64
        uefi: true
        lease_time: 3600
        ip: {address: %[3]s, netmask: %[8]s, gateway: %[9]s}
        name_servers: [%[9]s]
      netboot:
        allowPXE: true
        allowWorkflow: true
---
apiVersion: tinkerbell.org/v1alpha1
kind: Workflow
metadata:
  name: %[1]s-install
  namespace: %[4]s
  labels: {%[5]s: "%[6]d"}
spec:
  templateRef: %[7]s
  hardwareRef: %[1]s
  hardwareMap:
    device_1: %[2]s
`, name, m, s.IP(i), Namespace, ChunkLabel, chunk, TemplateName, s.Netmask, s.Gateway)
	if s.Netboot {
		b.WriteString("  bootOptions:\n    toggleAllowNetboot: true\n    bootMode: netboot\n")
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

package main

import (
	"fmt"

	"github.com/anvilproj/anvil/internal/benchfleet"
)

// What the server is given before the machines power on: one Template and
// two WorkflowRuleSets that between them match every machine (the
// large-memory third by the higher priority, the rest by CPU vendor), and
// one Hardware an operator made, which the API probe reads during the
// run.
const (
	templateName = "discovery-install"
	actionName   = "stream-image"
	probeName    = "api-probe"
	probeMAC     = "0a:00:00:00:00:01" // no machine's (machineMAC's are 02:…)
)

// manifests is the setup's YAML.
func manifests() string {
	ns := benchfleet.Namespace
	return fmt.Sprintf(`apiVersion: tinkerbell.org/v1alpha1
kind: Template
metadata:
  name: %[2]s
  namespace: %[1]s
spec:
  data: |
    version: "0.1"
    name: discovery-install
    global_timeout: 1800
    tasks:
      - name: install
        worker: "{{.device_1}}"
        volumes: [/dev:/dev]
        actions:
          - name: %[3]s
            image: quay.io/tinkerbell/actions/image2disk:v1.0.0
            timeout: 600
            environment:
              IMG_URL: http://10.0.0.2:7080/images/debian-12.raw.zst
              DEST_DISK: {{ index .Hardware.Disks 0 }}
              COMPRESSED: true
              ROLE: "{{ .role }}"
---
apiVersion: tinkerbell.org/v1alpha1
kind: WorkflowRuleSet
metadata:
  name: large-memory
  namespace: %[1]s
spec:
  priority: 10
  rules:
    - '{"memory": {"total": ["%[4]s"]}}'
  workflow:
    template:
      ref: %[2]s
      agentValue: device_1
      kvs: {role: compute}
---
apiVersion: tinkerbell.org/v1alpha1
kind: WorkflowRuleSet
metadata:
  name: intel
  namespace: %[1]s
spec:
  rules:
    - '{"cpu": {"processors": {"vendor": ["GenuineIntel"]}}}'
  workflow:
    template:
      ref: %[2]s
      agentValue: device_1
      kvs: {role: general}
---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata:
  name: %[5]s
  namespace: %[1]s
spec:
  interfaces:
    - dhcp: {mac: "%[6]s", hostname: %[5]s}
      netboot: {allowPXE: false, allowWorkflow: false}
`, ns, templateName, actionName, largeMemory, probeName, probeMAC)
}

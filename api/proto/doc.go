// Package tinkproto is Tinkerbell's worker protocol (protobuf package
// "proto", service proto.WorkflowService: GetAction, ReportActionStatus) as
// Anvil serves it to tink-agent: the code generated from workflow.proto by
// `make generate`, and this file. The protocol is upstream's wire contract
// and must not change; internal/api's tinkwire_test.go checks it against the
// descriptors compiled into the real tink-agent. internal/api serves it.
package tinkproto

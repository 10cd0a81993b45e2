package api

import (
	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
)

// The per-kind adapters: nothing but constructors and field accessors.

type hardwareService = resource[v1.Hardware, *v1.Hardware, v1.CreateHardwareRequest, v1.UpdateHardwareRequest, v1.HardwareList, v1.HardwareEvent]

func newHardwareService(s *Services) *hardwareService {
	return &hardwareService{s: s, kindAdapter: kindAdapter[v1.Hardware, *v1.Hardware, v1.CreateHardwareRequest, v1.UpdateHardwareRequest, v1.HardwareList, v1.HardwareEvent]{
		kind: model.KindHardware,
		message: func(p objectParts) *v1.Hardware {
			return &v1.Hardware{ApiVersion: p.APIVersion, Kind: p.Kind, Metadata: p.Meta, Spec: p.Spec, Status: p.Status}
		},
		createArg: (*v1.CreateHardwareRequest).GetHardware,
		updateArg: (*v1.UpdateHardwareRequest).GetHardware,
		list: func(items []*v1.Hardware, rv string) *v1.HardwareList {
			return &v1.HardwareList{Items: items, ResourceVersion: rv}
		},
		event: func(t v1.EventType, m *v1.Hardware) *v1.HardwareEvent {
			return &v1.HardwareEvent{Type: t, Hardware: m}
		},
	}}
}

type templateService = resource[v1.Template, *v1.Template, v1.CreateTemplateRequest, v1.UpdateTemplateRequest, v1.TemplateList, v1.TemplateEvent]

func newTemplateService(s *Services) *templateService {
	return &templateService{s: s, kindAdapter: kindAdapter[v1.Template, *v1.Template, v1.CreateTemplateRequest, v1.UpdateTemplateRequest, v1.TemplateList, v1.TemplateEvent]{
		kind: model.KindTemplate,
		message: func(p objectParts) *v1.Template {
			return &v1.Template{ApiVersion: p.APIVersion, Kind: p.Kind, Metadata: p.Meta, Spec: p.Spec, Status: p.Status}
		},
		createArg: (*v1.CreateTemplateRequest).GetTemplate,
		updateArg: (*v1.UpdateTemplateRequest).GetTemplate,
		list: func(items []*v1.Template, rv string) *v1.TemplateList {
			return &v1.TemplateList{Items: items, ResourceVersion: rv}
		},
		event: func(t v1.EventType, m *v1.Template) *v1.TemplateEvent {
			return &v1.TemplateEvent{Type: t, Template: m}
		},
	}}
}

type workflowService = resource[v1.Workflow, *v1.Workflow, v1.CreateWorkflowRequest, v1.UpdateWorkflowRequest, v1.WorkflowList, v1.WorkflowEvent]

func newWorkflowService(s *Services) *workflowService {
	return &workflowService{s: s, kindAdapter: kindAdapter[v1.Workflow, *v1.Workflow, v1.CreateWorkflowRequest, v1.UpdateWorkflowRequest, v1.WorkflowList, v1.WorkflowEvent]{
		kind: model.KindWorkflow,
		message: func(p objectParts) *v1.Workflow {
			return &v1.Workflow{ApiVersion: p.APIVersion, Kind: p.Kind, Metadata: p.Meta, Spec: p.Spec, Status: p.Status}
		},
		createArg: (*v1.CreateWorkflowRequest).GetWorkflow,
		updateArg: (*v1.UpdateWorkflowRequest).GetWorkflow,
		list: func(items []*v1.Workflow, rv string) *v1.WorkflowList {
			return &v1.WorkflowList{Items: items, ResourceVersion: rv}
		},
		event: func(t v1.EventType, m *v1.Workflow) *v1.WorkflowEvent {
			return &v1.WorkflowEvent{Type: t, Workflow: m}
		},
	}}
}

type bootProfileService = resource[v1.BootProfile, *v1.BootProfile, v1.CreateBootProfileRequest, v1.UpdateBootProfileRequest, v1.BootProfileList, v1.BootProfileEvent]

func newBootProfileService(s *Services) *bootProfileService {
	return &bootProfileService{s: s, kindAdapter: kindAdapter[v1.BootProfile, *v1.BootProfile, v1.CreateBootProfileRequest, v1.UpdateBootProfileRequest, v1.BootProfileList, v1.BootProfileEvent]{
		kind: model.KindBootProfile,
		message: func(p objectParts) *v1.BootProfile {
			return &v1.BootProfile{ApiVersion: p.APIVersion, Kind: p.Kind, Metadata: p.Meta, Spec: p.Spec, Status: p.Status}
		},
		createArg: (*v1.CreateBootProfileRequest).GetBootProfile,
		updateArg: (*v1.UpdateBootProfileRequest).GetBootProfile,
		list: func(items []*v1.BootProfile, rv string) *v1.BootProfileList {
			return &v1.BootProfileList{Items: items, ResourceVersion: rv}
		},
		event: func(t v1.EventType, m *v1.BootProfile) *v1.BootProfileEvent {
			return &v1.BootProfileEvent{Type: t, BootProfile: m}
		},
	}}
}

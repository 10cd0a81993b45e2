package api

import (
	v1 "github.com/anvilproj/anvil/api/anvil/v1"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/wire"
)

// The per-kind adapters: nothing but constructors and field accessors.

type hardwareService = resource[v1.Hardware, *v1.Hardware, v1.CreateHardwareRequest, v1.UpdateHardwareRequest, v1.HardwareList, v1.HardwareEvent]

func newHardwareService(s *Services) *hardwareService {
	return &hardwareService{s: s, kindAdapter: kindAdapter[v1.Hardware, *v1.Hardware, v1.CreateHardwareRequest, v1.UpdateHardwareRequest, v1.HardwareList, v1.HardwareEvent]{
		kind: model.KindHardware,
		message: func(p wire.Parts) *v1.Hardware {
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
		message: func(p wire.Parts) *v1.Template {
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
		message: func(p wire.Parts) *v1.Workflow {
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
		message: func(p wire.Parts) *v1.BootProfile {
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

type machineService = resource[v1.Machine, *v1.Machine, v1.CreateMachineRequest, v1.UpdateMachineRequest, v1.MachineList, v1.MachineEvent]

func newMachineService(s *Services) *machineService {
	return &machineService{s: s, kindAdapter: kindAdapter[v1.Machine, *v1.Machine, v1.CreateMachineRequest, v1.UpdateMachineRequest, v1.MachineList, v1.MachineEvent]{
		kind: model.KindMachine,
		message: func(p wire.Parts) *v1.Machine {
			return &v1.Machine{ApiVersion: p.APIVersion, Kind: p.Kind, Metadata: p.Meta, Spec: p.Spec, Status: p.Status}
		},
		createArg: (*v1.CreateMachineRequest).GetMachine,
		updateArg: (*v1.UpdateMachineRequest).GetMachine,
		list: func(items []*v1.Machine, rv string) *v1.MachineList {
			return &v1.MachineList{Items: items, ResourceVersion: rv}
		},
		event: func(t v1.EventType, m *v1.Machine) *v1.MachineEvent {
			return &v1.MachineEvent{Type: t, Machine: m}
		},
	}}
}

type bmcJobService = resource[v1.BmcJob, *v1.BmcJob, v1.CreateBmcJobRequest, v1.UpdateBmcJobRequest, v1.BmcJobList, v1.BmcJobEvent]

func newBMCJobService(s *Services) *bmcJobService {
	return &bmcJobService{s: s, kindAdapter: kindAdapter[v1.BmcJob, *v1.BmcJob, v1.CreateBmcJobRequest, v1.UpdateBmcJobRequest, v1.BmcJobList, v1.BmcJobEvent]{
		kind: model.KindJob,
		message: func(p wire.Parts) *v1.BmcJob {
			return &v1.BmcJob{ApiVersion: p.APIVersion, Kind: p.Kind, Metadata: p.Meta, Spec: p.Spec, Status: p.Status}
		},
		createArg: (*v1.CreateBmcJobRequest).GetJob,
		updateArg: (*v1.UpdateBmcJobRequest).GetJob,
		list: func(items []*v1.BmcJob, rv string) *v1.BmcJobList {
			return &v1.BmcJobList{Items: items, ResourceVersion: rv}
		},
		event: func(t v1.EventType, m *v1.BmcJob) *v1.BmcJobEvent {
			return &v1.BmcJobEvent{Type: t, Job: m}
		},
	}}
}

type bmcTaskService = resource[v1.BmcTask, *v1.BmcTask, v1.CreateBmcTaskRequest, v1.UpdateBmcTaskRequest, v1.BmcTaskList, v1.BmcTaskEvent]

func newBMCTaskService(s *Services) *bmcTaskService {
	return &bmcTaskService{s: s, kindAdapter: kindAdapter[v1.BmcTask, *v1.BmcTask, v1.CreateBmcTaskRequest, v1.UpdateBmcTaskRequest, v1.BmcTaskList, v1.BmcTaskEvent]{
		kind: model.KindTask,
		message: func(p wire.Parts) *v1.BmcTask {
			return &v1.BmcTask{ApiVersion: p.APIVersion, Kind: p.Kind, Metadata: p.Meta, Spec: p.Spec, Status: p.Status}
		},
		createArg: (*v1.CreateBmcTaskRequest).GetTask,
		updateArg: (*v1.UpdateBmcTaskRequest).GetTask,
		list: func(items []*v1.BmcTask, rv string) *v1.BmcTaskList {
			return &v1.BmcTaskList{Items: items, ResourceVersion: rv}
		},
		event: func(t v1.EventType, m *v1.BmcTask) *v1.BmcTaskEvent {
			return &v1.BmcTaskEvent{Type: t, Task: m}
		},
	}}
}

type ruleSetService = resource[v1.WorkflowRuleSet, *v1.WorkflowRuleSet, v1.CreateWorkflowRuleSetRequest, v1.UpdateWorkflowRuleSetRequest, v1.WorkflowRuleSetList, v1.WorkflowRuleSetEvent]

func newRuleSetService(s *Services) *ruleSetService {
	return &ruleSetService{s: s, kindAdapter: kindAdapter[v1.WorkflowRuleSet, *v1.WorkflowRuleSet, v1.CreateWorkflowRuleSetRequest, v1.UpdateWorkflowRuleSetRequest, v1.WorkflowRuleSetList, v1.WorkflowRuleSetEvent]{
		kind: model.KindWorkflowRuleSet,
		message: func(p wire.Parts) *v1.WorkflowRuleSet {
			return &v1.WorkflowRuleSet{ApiVersion: p.APIVersion, Kind: p.Kind, Metadata: p.Meta, Spec: p.Spec, Status: p.Status}
		},
		createArg: (*v1.CreateWorkflowRuleSetRequest).GetWorkflowRuleSet,
		updateArg: (*v1.UpdateWorkflowRuleSetRequest).GetWorkflowRuleSet,
		list: func(items []*v1.WorkflowRuleSet, rv string) *v1.WorkflowRuleSetList {
			return &v1.WorkflowRuleSetList{Items: items, ResourceVersion: rv}
		},
		event: func(t v1.EventType, m *v1.WorkflowRuleSet) *v1.WorkflowRuleSetEvent {
			return &v1.WorkflowRuleSetEvent{Type: t, WorkflowRuleSet: m}
		},
	}}
}

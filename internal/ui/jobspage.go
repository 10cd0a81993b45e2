package ui

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anvilproj/anvil/internal/macaddr"
	"github.com/anvilproj/anvil/internal/model"
	"github.com/anvilproj/anvil/internal/store"
)

// jobStates are the states the jobs page filters by: a machine's states
// but NONE, which is no job's.
var jobStates = states[:len(states)-1]

// jobRow is one job (a Workflow, docs/jobs.md) of the jobs page.
type jobRow struct {
	wfRow
	Template string
	Created  *time.Time
}

// jobFilter is what the jobs page is asked for.
type jobFilter struct {
	State  string // one of states, or "" for any
	Device string // a Hardware's name or one of its MACs
	Page   int    // from 1
}

// jobPage is one page of jobs.
type jobPage struct {
	Rows        []jobRow
	Total       int
	Page, Pages int
}

// pageOf returns the page numbers for total rows asked for page (from
// 1): the first row's index, and the page and page count to show.
func pageOf(total, page int) (first, shown, pages int) {
	pages = max(1, (total+PageSize-1)/PageSize)
	shown = max(1, page)
	return (shown - 1) * PageSize, shown, pages
}

// parsePage reads the query's page number: 1 when absent.
func parsePage(q url.Values) (int, error) {
	p := q.Get("page")
	if p == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("page %q: want a page number from 1", p)
	}
	return n, nil
}

// pageLinks returns the queries of the pages before and after page (""
// at either end), keeping the filters of q.
func pageLinks(q url.Values, page, pages int) (prev, next string) {
	link := func(n int) string {
		v := url.Values{}
		for k, vals := range q {
			if k != "page" && len(vals) > 0 && vals[0] != "" {
				v.Set(k, vals[0])
			}
		}
		v.Set("page", strconv.Itoa(n))
		return "?" + v.Encode()
	}
	if page > 1 {
		prev = link(page - 1)
	}
	if page < pages {
		next = link(page + 1)
	}
	return prev, next
}

// jobs answers one page of the jobs p sees that match f, newest first.
// They are read from the view (the store's shared objects, no copy):
// JobService.ListJobs would copy and convert every workflow of the fleet
// for each page.
func (u *UI) jobs(r *request, f jobFilter) (jobPage, error) {
	if f.State != "" && !slices.Contains(jobStates, f.State) {
		return jobPage{}, fmt.Errorf("state %q: want one of %s", f.State, strings.Join(jobStates, ", "))
	}
	p := r.principal
	var devices map[string]bool // "namespace/name" of the device's Hardware; nil: any
	if f.Device != "" {
		devices = map[string]bool{}
		if mac, err := macaddr.Parse(f.Device); err == nil {
			objs, err := store.SharedIndexer(u.cfg.Store).ByIndex(r.Context(), model.KindHardware, store.IndexMAC, mac.String())
			if err != nil {
				return jobPage{}, err
			}
			for _, o := range objs {
				m := o.GetObjectMeta()
				devices[m.Namespace+"/"+m.Name] = true
			}
		}
	}
	// Sorted by keys copied out once: comparing through the pointers
	// (newer) is most of the page's cost over 10,000 workflows.
	type keyed struct {
		created         int64 // UnixNano; 0 when unset
		name, namespace string
		w               *model.Workflow
	}
	var wfs []keyed
	v := u.view
	v.mu.RLock()
	for _, w := range v.wfs {
		if !p.Sees(w.Namespace) || (f.State != "" && machineState(w) != f.State) {
			continue
		}
		if devices != nil && !devices[w.Namespace+"/"+w.Spec.HardwareRef] && w.Spec.HardwareRef != f.Device {
			continue
		}
		k := keyed{name: w.Name, namespace: w.Namespace, w: w}
		if w.CreationTimestamp != nil {
			k.created = w.CreationTimestamp.UnixNano()
		}
		wfs = append(wfs, k)
	}
	v.mu.RUnlock()
	// Newest first, as newer orders a machine's workflows.
	slices.SortFunc(wfs, func(a, b keyed) int {
		return cmp.Or(cmp.Compare(b.created, a.created), cmp.Compare(b.name, a.name), cmp.Compare(a.namespace, b.namespace))
	})
	first, page, pages := pageOf(len(wfs), f.Page)
	out := jobPage{Total: len(wfs), Page: page, Pages: pages}
	for _, k := range wfs[min(first, len(wfs)):min(first+PageSize, len(wfs))] {
		w := k.w
		out.Rows = append(out.Rows, jobRow{wfRow: newWFRow(w), Template: w.Spec.TemplateRef, Created: w.CreationTimestamp})
	}
	return out, nil
}

// bmcJobRow is one BMC Job (bmc.tinkerbell.org Job): power and boot
// device tasks the BMC executor runs on a Machine.
type bmcJobRow struct {
	Namespace, Name, Machine string
	Tasks                    []string
	State, Message           string
	Created, Started, Ended  *time.Time
}

// bmcJobState is a BMC Job's state from its conditions, as the BMC
// executor writes them.
func bmcJobState(j *model.Job) (state, msg string) {
	for _, c := range j.Status.Conditions {
		if c.Type == model.ConditionFailed && c.Status == model.ConditionTrue {
			return string(model.StateFailed), c.Message
		}
	}
	switch {
	case model.HasCondition(j.Status.Conditions, model.ConditionCompleted):
		return string(model.StateSuccess), ""
	case model.HasCondition(j.Status.Conditions, model.ConditionRunning):
		return string(model.StateRunning), ""
	}
	return string(model.StatePending), ""
}

// bmcTask says what one task of a BMC Job does.
func bmcTask(a model.BMCAction) string {
	switch {
	case a.PowerAction != nil:
		return "power " + *a.PowerAction
	case a.VirtualMediaAction != nil:
		if a.VirtualMediaAction.MediaURL == "" {
			return "eject " + a.VirtualMediaAction.Kind
		}
		return "insert " + a.VirtualMediaAction.Kind + " " + a.VirtualMediaAction.MediaURL
	}
	if dev, _, persistent, ok := a.BootDeviceOf(); ok {
		if persistent {
			return "boot " + dev + " (persistent)"
		}
		return "next boot " + dev
	}
	return "unknown task"
}

// bmcJobPage is one page of BMC Jobs.
type bmcJobPage struct {
	Rows        []bmcJobRow
	Total       int
	Page, Pages int
}

// bmcJobs answers one page of the BMC Jobs p sees, newest first. They
// are listed from the store (copies): a fleet holds one per power or
// boot device change that is kept, far fewer than workflows, and the
// view does not follow them.
func (u *UI) bmcJobs(r *request, page int) (bmcJobPage, error) {
	p := r.principal
	objs, _, err := u.cfg.Store.List(r.Context(), model.KindJob, store.ListOptions{Namespace: p.Scope("")})
	if err != nil {
		return bmcJobPage{}, err
	}
	var jobs []*model.Job
	for _, o := range objs {
		if j := o.(*model.Job); p.Sees(j.Namespace) {
			jobs = append(jobs, j)
		}
	}
	slices.SortFunc(jobs, func(a, b *model.Job) int {
		ta, tb := a.CreationTimestamp, b.CreationTimestamp
		if ta != nil && tb != nil && !ta.Equal(*tb) {
			return tb.Compare(*ta)
		}
		return cmp.Or(cmp.Compare(b.Name, a.Name), cmp.Compare(a.Namespace, b.Namespace))
	})
	first, page, pages := pageOf(len(jobs), page)
	out := bmcJobPage{Total: len(jobs), Page: page, Pages: pages}
	for _, j := range jobs[min(first, len(jobs)):min(first+PageSize, len(jobs))] {
		row := bmcJobRow{Namespace: j.Namespace, Name: j.Name, Machine: j.Spec.MachineRef.Name,
			Created: j.CreationTimestamp, Started: j.Status.StartTime, Ended: j.Status.CompletionTime}
		if ns := j.Spec.MachineRef.Namespace; ns != "" && ns != j.Namespace {
			row.Machine = ns + "/" + row.Machine
		}
		for _, t := range j.Spec.Tasks {
			row.Tasks = append(row.Tasks, bmcTask(t))
		}
		row.State, row.Message = bmcJobState(j)
		out.Rows = append(out.Rows, row)
	}
	return out, nil
}

type jobsData struct {
	Tab        string // "" (workflows) or "bmc"
	Filter     jobFilter
	States     []string
	Jobs       jobPage
	BMC        bmcJobPage
	Error      string
	Prev, Next string
}

// jobsPage is /ui/jobs: the JobService's jobs (Workflows), or with
// ?tab=bmc the BMC Jobs.
func (u *UI) jobsPage(w http.ResponseWriter, r *request) {
	q := r.URL.Query()
	d := jobsData{Tab: q.Get("tab"), States: jobStates,
		Filter: jobFilter{State: q.Get("state"), Device: strings.TrimSpace(q.Get("device"))}}
	page, err := parsePage(q)
	if err != nil {
		u.errorPage(w, r, http.StatusBadRequest, err.Error())
		return
	}
	d.Filter.Page = page
	status := http.StatusOK
	var pages int
	switch d.Tab {
	case "":
		d.Jobs, err = u.jobs(r, d.Filter)
		page, pages = d.Jobs.Page, d.Jobs.Pages
	case "bmc":
		d.BMC, err = u.bmcJobs(r, page)
		page, pages = d.BMC.Page, d.BMC.Pages
	default:
		err = fmt.Errorf("tab %q: want none or bmc", d.Tab)
	}
	if err != nil {
		d.Error, status = err.Error(), http.StatusBadRequest
	}
	d.Prev, d.Next = pageLinks(q, page, pages)
	u.render(w, r, status, "jobs", "Jobs", d)
}
